//! Bearer tokens: who may call, what each token may do, and that a key,
//! a load or a revocation belongs to the token it names.

use serde_json::{json, Value};

use crate::helpers::*;
use crate::support::*;
use idem::config::Settings;

/// `POST /tokens` with the admin client.
async fn post_token(app: &TestApp, request: &Value) -> reqwest::Response {
    let made = app.client.post(app.url("/tokens")).json(request);
    made.send().await.unwrap()
}

/// Makes a token with the admin client; returns its id and its secret.
async fn make_token(app: &TestApp, request: Value) -> (String, String) {
    crate::support::make_token(&app.client, &app.base, &request).await
}

async fn status_of(request: reqwest::RequestBuilder) -> u16 {
    request.send().await.unwrap().status().as_u16()
}

fn day_of_orders(id: i64) -> String {
    ndjson(&[order(id, "new", "2026-10-12T09:00:00Z")])
}

#[tokio::test]
async fn without_a_valid_token_only_probes_and_the_spec_answer() {
    let app = spawn_app().await;
    let anonymous = reqwest::Client::new();
    for path in ["/healthz", "/readyz", "/openapi.yaml"] {
        assert_eq!(status_of(anonymous.get(app.url(path))).await, 200, "{path}");
    }
    for path in [
        "/tables",
        "/loads",
        "/tokens",
        "/partitions/orders",
        "/no/such/path",
    ] {
        let r = anonymous.get(app.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 401, "{path}");
        assert_eq!(r.headers()["www-authenticate"], r#"Bearer realm="idem""#);
        assert_eq!(r.headers()["content-type"], "application/problem+json");
        assert_eq!(json_body(r).await["code"], "unauthorized");
    }
    let wrong = client_with_token("idem_not-a-token-anyone-was-given-0000000000");
    let r = wrong.get(app.url("/tables")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(
        r.headers()["www-authenticate"],
        r#"Bearer realm="idem", error="invalid_token""#
    );
    let basic = anonymous
        .get(app.url("/tables"))
        .header("authorization", format!("Basic {ADMIN_TOKEN}"));
    assert_eq!(status_of(basic).await, 401);
    // Nothing was written by any of them.
    assert_eq!(
        status_of(anonymous.put(app.url("/tables/orders")).body(ORDERS)).await,
        401
    );
    assert_eq!(app.get("/tables/orders").await.status(), 404);
}

#[tokio::test]
async fn admins_make_list_and_revoke_tokens_and_secrets_are_kept_only_as_hashes() {
    let app = spawn_app().await;
    let (id, secret) = make_token(&app, json!({"name": "loader", "scopes": ["write"]})).await;
    assert!(
        secret.starts_with("idem_") && secret.len() >= 40,
        "{secret}"
    );

    let listed = json_body(app.get("/tokens").await).await;
    let listed = listed.as_array().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["id"], id.as_str());
    assert_eq!(listed[0]["tables"], json!(["*"]));
    assert_eq!(listed[0]["revoked_at"], Value::Null);
    assert!(
        listed[0].get("token").is_none(),
        "a listing shows no secret"
    );
    let stored: i64 = sqlx::query_scalar(
        "select count(*) from idem.tokens where secret_sha256 = sha256(convert_to($1, 'UTF8'))
            and position(convert_to($1, 'UTF8') in secret_sha256) = 0",
    )
    .bind(&secret)
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert_eq!(
        stored, 1,
        "the table holds the SHA-256 of the secret, not the secret"
    );

    let loader = client_with_token(&secret);
    assert_eq!(
        status_of(loader.get(app.url("/tokens"))).await,
        403,
        "not an admin"
    );
    let made = loader
        .post(app.url("/tokens"))
        .json(&json!({"name": "x", "scopes": ["admin"]}));
    assert_eq!(
        status_of(made).await,
        403,
        "a write token cannot make an admin"
    );

    let revoke = app.client.delete(app.url(&format!("/tokens/{id}")));
    assert_eq!(status_of(revoke).await, 204);
    let r = loader.get(app.url("/loads")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert!(json_body(r).await["detail"]
        .as_str()
        .unwrap()
        .contains("revoked"));
    let again = app.client.delete(app.url(&format!("/tokens/{id}")));
    assert_eq!(
        status_of(again).await,
        204,
        "revoking twice is still revoked"
    );
    let gone = app.client.get(app.url(&format!("/tokens/{id}")));
    assert_eq!(
        status_of(gone).await,
        404,
        "a revoked token is gone from the API"
    );
    assert_eq!(json_body(app.get("/tokens").await).await, json!([]));
    let unknown = app
        .client
        .delete(app.url(&format!("/tokens/{}", uuid::Uuid::nil())));
    assert_eq!(status_of(unknown).await, 404);
}

#[tokio::test]
async fn token_requests_outside_the_contract_are_400() {
    let app = spawn_app().await;
    let bad = [
        json!({"name": "", "scopes": ["read"]}),
        json!({"name": "x", "scopes": []}),
        json!({"name": "x", "scopes": ["read", "read"]}),
        json!({"name": "x", "scopes": ["superuser"]}),
        json!({"name": "x", "scopes": ["read"], "tables": ["Orders"]}),
        json!({"name": "x", "scopes": ["read"], "tables": []}),
        json!({"name": "x", "scopes": ["read"], "expires_at": "2001-01-01T00:00:00Z"}),
        json!({"name": "x", "scopes": ["read"], "owner": "me"}),
    ];
    for request in bad {
        let r = post_token(&app, &request).await;
        assert_eq!(r.status(), 400, "{request}");
        assert_eq!(
            json_body(r).await["code"],
            "invalid_token_request",
            "{request}"
        );
    }
    let count: i64 = sqlx::query_scalar("select count(*) from idem.tokens")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(count, 0);
}

#[tokio::test]
async fn scopes_and_table_patterns_decide_every_verb() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let (_, reader) = make_token(&app, json!({"name": "reader", "scopes": ["read"]})).await;
    let (_, sales) = make_token(
        &app,
        json!({"name": "sales", "scopes": ["write", "read"], "tables": ["sales_*"]}),
    )
    .await;
    let (reader, sales) = (client_with_token(&reader), client_with_token(&sales));
    let day = "/partitions/orders/2026-10-12";
    let put = |client: &reqwest::Client, path: &str| {
        client
            .put(app.url(path))
            .header("content-type", "application/x-ndjson")
            .body(day_of_orders(1))
    };
    assert_eq!(status_of(put(&app.client, day)).await, 200);

    // read: GETs yes, writes no.
    assert_eq!(status_of(reader.get(app.url(day))).await, 200);
    assert_eq!(status_of(reader.head(app.url(day))).await, 200);
    assert_eq!(status_of(reader.get(app.url("/tables/orders"))).await, 200);
    assert_eq!(status_of(put(&reader, day)).await, 403);
    assert_eq!(status_of(reader.delete(app.url(day))).await, 403);
    let post = reader
        .post(app.url("/rows?table=orders"))
        .header("idempotency-key", "k1")
        .header("content-type", "application/x-ndjson")
        .body(day_of_orders(2));
    assert_eq!(status_of(post).await, 403);
    let declare = reader.put(app.url("/tables/orders_2")).body(ORDERS);
    assert_eq!(status_of(declare).await, 403);

    // write on sales_*: orders is out of reach, sales_eu is its own.
    let r = put(&sales, day).send().await.unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(json_body(r).await["code"], "forbidden");
    assert_eq!(status_of(sales.get(app.url(day))).await, 403);
    assert_eq!(
        status_of(sales.put(app.url("/tables/orders_copy")).body(ORDERS)).await,
        403
    );
    assert_eq!(
        status_of(sales.put(app.url("/tables/sales_eu")).body(ORDERS)).await,
        201
    );
    let auto_created = put(&sales, "/partitions/sales_us/2026-10-12");
    assert_eq!(
        status_of(auto_created).await,
        200,
        "a matching table is created on write"
    );
    assert_eq!(
        app.rows("orders", "2026-10-12").await.len(),
        1,
        "orders untouched"
    );

    // Lists show what the caller may read.
    let tables = json_body(sales.get(app.url("/tables")).send().await.unwrap()).await;
    let names: Vec<&str> = tables
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["sales_eu", "sales_us"]);
    let all = json_body(reader.get(app.url("/tables")).send().await.unwrap()).await;
    assert_eq!(all.as_array().unwrap().len(), 3);
}

/// A token is refused from its expiry on, also by a process that
/// remembers it.
#[tokio::test]
async fn an_expired_token_is_refused() {
    let app = spawn_app().await;
    let (id, secret) = make_token(
        &app,
        json!({"name": "short", "scopes": ["read"], "expires_at": "2999-01-01T00:00:00Z"}),
    )
    .await;
    // Expiring in a second (by the database's clock), before its first use.
    sqlx::query(
        "update idem.tokens set expires_at = now() + interval '1 second' where id = $1::uuid",
    )
    .bind(&id)
    .execute(&app.db)
    .await
    .unwrap();
    let short = client_with_token(&secret);
    assert_eq!(status_of(short.get(app.url("/tables"))).await, 200);
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let r = short.get(app.url("/tables")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert!(json_body(r).await["detail"]
        .as_str()
        .unwrap()
        .contains("expired"));
}

#[tokio::test]
async fn one_key_from_two_tokens_is_two_keys_each_replaying_its_own() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let mut clients = Vec::new();
    for name in ["team_a", "team_b"] {
        let (_, secret) =
            make_token(&app, json!({"name": name, "scopes": ["write", "read"]})).await;
        clients.push(client_with_token(&secret));
    }
    let post = |client: &reqwest::Client, id: i64| {
        client
            .post(app.url("/rows?table=orders"))
            .header("idempotency-key", "nightly-1")
            .header("content-type", "application/x-ndjson")
            .body(day_of_orders(id))
            .send()
    };
    let mut first = Vec::new();
    for (client, id) in clients.iter().zip([10, 20]) {
        let r = post(client, id).await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["idempotent-replayed"], "false");
        first.push(json_body(r).await);
    }
    assert_ne!(first[0]["load_id"], first[1]["load_id"], "two writes");
    for ((client, id), answer) in clients.iter().zip([10, 20]).zip(&first) {
        let r = post(client, id).await.unwrap();
        assert_eq!(r.headers()["idempotent-replayed"], "true");
        assert_eq!(json_body(r).await["load_id"], answer["load_id"]);
        let key = client
            .get(app.url("/idempotency-keys/nightly-1"))
            .send()
            .await
            .unwrap();
        assert_eq!(json_body(key).await["load_id"], answer["load_id"]);
    }
    assert_eq!(app.count("orders", "2026-10-12").await, 2);
    // The admin has no key of that name: it sees neither.
    assert_eq!(app.get("/idempotency-keys/nightly-1").await.status(), 404);
}

#[tokio::test]
async fn the_ledger_names_the_token_and_shows_loads_only_to_their_readers() {
    let app = spawn_app().await;
    let (sales_id, sales) = make_token(
        &app,
        json!({"name": "sales-loader", "scopes": ["write", "read"], "tables": ["sales_*"]}),
    )
    .await;
    let sales = client_with_token(&sales);
    let put = |client: &reqwest::Client, table: &str| {
        client
            .put(app.url(&format!("/partitions/{table}/2026-10-12")))
            .header("content-type", "application/x-ndjson")
            .body(day_of_orders(1))
            .send()
    };
    let sales_load = json_body(put(&sales, "sales_eu").await.unwrap()).await["load_id"].clone();
    let orders_load = json_body(put(&app.client, "orders").await.unwrap()).await["load_id"].clone();

    let load = json_body(
        app.get(&format!("/loads/{}", sales_load.as_str().unwrap()))
            .await,
    )
    .await;
    assert_eq!(load["token_name"], "sales-loader");
    assert_eq!(load["token_id"], sales_id.as_str());
    let load = json_body(
        app.get(&format!("/loads/{}", orders_load.as_str().unwrap()))
            .await,
    )
    .await;
    assert_eq!(load["token_name"], "admin");

    let listed = json_body(sales.get(app.url("/loads")).send().await.unwrap()).await;
    let ids: Vec<&Value> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|l| &l["load_id"])
        .collect();
    assert_eq!(ids, [&sales_load]);
    let other = sales.get(app.url(&format!("/loads/{}", orders_load.as_str().unwrap())));
    assert_eq!(status_of(other).await, 404);
    assert_eq!(
        status_of(sales.get(app.url("/loads?table=orders"))).await,
        403
    );
}

/// The other process remembers the token it checked, and forgets it when
/// the revocation's notice arrives: within moments, not at once.
#[tokio::test]
async fn a_revocation_reaches_another_process_within_moments() {
    let first = spawn_app().await;
    let second = spawn_app_on(first.options.clone(), Settings::default()).await;
    let (id, secret) = make_token(&first, json!({"name": "ci", "scopes": ["read"]})).await;
    let ci = client_with_token(&secret);
    for _ in 0..3 {
        assert_eq!(status_of(ci.get(second.url("/tables"))).await, 200);
    }
    let revoke = first.client.delete(first.url(&format!("/tokens/{id}")));
    assert_eq!(status_of(revoke).await, 204);
    let revoked_at = std::time::Instant::now();
    while status_of(ci.get(second.url("/tables"))).await != 401 {
        assert!(
            revoked_at.elapsed() < std::time::Duration::from_secs(2),
            "the other process still lets the revoked token in"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    for _ in 0..3 {
        assert_eq!(status_of(ci.get(second.url("/tables"))).await, 401);
    }
}

#[tokio::test]
async fn open_mode_lets_everyone_in_as_one_principal() {
    let app = spawn_app_with(Settings {
        insecure_no_auth: true,
        ..Settings::default()
    })
    .await;
    let anyone = reqwest::Client::new();
    assert_eq!(
        status_of(anyone.put(app.url("/tables/orders")).body(ORDERS)).await,
        201
    );
    assert_eq!(status_of(anyone.get(app.url("/tokens"))).await, 200);
}

#[tokio::test]
async fn metrics_need_an_admin_unless_opened_to_the_local_network() {
    let app = spawn_app().await;
    let (_, reader) = make_token(&app, json!({"name": "reader", "scopes": ["read"]})).await;
    assert_eq!(app.get("/metrics").await.status(), 200);
    assert_eq!(
        status_of(client_with_token(&reader).get(app.url("/metrics"))).await,
        403
    );
    assert_eq!(
        status_of(reqwest::Client::new().get(app.url("/metrics"))).await,
        401
    );

    let open = spawn_app_with(Settings {
        metrics_open_to_local: true,
        ..Settings::default()
    })
    .await;
    let anonymous = reqwest::Client::new();
    assert_eq!(
        status_of(anonymous.get(open.url("/metrics"))).await,
        200,
        "from 127.0.0.1"
    );
    assert_eq!(
        status_of(anonymous.get(open.url("/tables"))).await,
        401,
        "nothing else"
    );
}
