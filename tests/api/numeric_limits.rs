//! Postgres's numeric holds up to 131072 digits before the point and 16383
//! after. Over HTTP: values at the limits are stored exactly; one digit past
//! them is a bad row that names its line and column, and nothing changes.

use std::collections::HashMap;

use serde_json::value::RawValue;

use crate::helpers::*;
use crate::support::*;

const DAY: &str = "/partitions/orders/2026-10-12";

/// `n` digits that are not all alike, the first not zero.
fn digits(n: usize) -> String {
    (0..n)
        .map(|i| char::from(b'1' + u8::try_from(i % 9).unwrap()))
        .collect()
}

/// An NDJSON line of an order whose amount is the JSON number `amount`.
fn order_line(id: i64, amount: &str) -> String {
    format!(r#"{{"order_id":{id},"ds":"2026-10-12","status":"paid","amount":{amount}}}"#)
}

/// The partition as read back: order id to the amount's JSON text as sent
/// by the server (not parsed into a float, which could not hold it).
async fn amounts(app: &TestApp) -> HashMap<i64, String> {
    let r = app.get(DAY).await;
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    text.lines()
        .map(|line| {
            let row: HashMap<String, Box<RawValue>> = serde_json::from_str(line).unwrap();
            let id = row["order_id"].get().parse().unwrap();
            (id, row["amount"].get().to_string())
        })
        .collect()
}

#[tokio::test]
async fn numerics_at_postgres_limits_are_stored_exactly() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let widest_int = digits(131_072);
    let widest_frac = format!("0.{}", digits(16_383));
    let both = format!("-{}.{}", digits(131_072), digits(16_383));
    // Exponent forms reach the same limits: 1e131071 has 131072 digits
    // before the point, 1e-16383 has 16383 after.
    let exp_int = "1e131071".to_string();
    let exp_frac = "1e-16383".to_string();
    let body: String = [&widest_int, &widest_frac, &both, &exp_int, &exp_frac]
        .iter()
        .zip(1..)
        .map(|(amount, id)| order_line(id, amount) + "\n")
        .collect();

    let r = app.put(DAY, "application/x-ndjson", body).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());

    let stored = amounts(&app).await;
    assert_eq!(stored[&1], widest_int);
    assert_eq!(stored[&2], widest_frac);
    assert_eq!(stored[&3], both);
    assert_eq!(stored[&4], format!("1{}", "0".repeat(131_071)));
    assert_eq!(stored[&5], format!("0.{}1", "0".repeat(16_382)));
}

#[tokio::test]
async fn a_numeric_one_digit_past_a_limit_is_a_bad_row_and_changes_nothing() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let r = app
        .put(DAY, "application/x-ndjson", order_line(1, "10.50"))
        .await;
    assert_eq!(r.status(), 200);
    let head = app.get(DAY).await;
    let etag = head.headers()["etag"].clone();
    let before = head.text().await.unwrap();

    let too_wide = digits(131_073);
    let too_fine = format!("0.{}", digits(16_384));
    for (amount, reason) in [
        (
            &too_wide,
            "131073 digits before the point; Postgres holds at most 131072",
        ),
        (
            &too_fine,
            "16384 digits after the point; Postgres holds at most 16383",
        ),
    ] {
        let body = format!("{}\n{}\n", order_line(2, "1"), order_line(3, amount));
        let r = app.put(DAY, "application/x-ndjson", body).await;
        assert_eq!(r.status(), 422);
        let problem = json_body(r).await;
        assert_eq!(problem["code"], "bad_rows");
        assert_eq!(problem["rejected"], 1);
        let error = &problem["errors"][0];
        assert_eq!(error["line"], 2);
        assert_eq!(error["column"], "amount");
        let message = error["message"].as_str().unwrap();
        assert!(message.contains(reason), "{message}");

        let after = app.get(DAY).await;
        assert_eq!(after.headers()["etag"], etag);
        assert_eq!(after.text().await.unwrap(), before);
    }
}

#[tokio::test]
async fn a_post_with_a_numeric_past_a_limit_is_refused_and_writes_nothing() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let too_wide = digits(131_073);
    let body = format!("{}\n{}\n", order_line(1, "1"), order_line(2, &too_wide));
    let r = app
        .client
        .post(app.url("/rows?table=orders"))
        .header("content-type", "application/x-ndjson")
        .header("idempotency-key", "too-wide-1")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    let problem = json_body(r).await;
    assert_eq!(problem["errors"][0]["line"], 2);
    assert_eq!(problem["errors"][0]["column"], "amount");
    assert_eq!(app.count("orders", "2026-10-12").await, 0);
    let key = app.get("/idempotency-keys/too-wide-1").await;
    assert_eq!(key.status(), 404, "a refused write keeps no key");
}
