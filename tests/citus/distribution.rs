//! Declared distribution on the cluster: where Citus puts each table idem
//! makes (its parent, each partition, its history, its stages), what the
//! server's default does, how a distribution changes, and what Citus cannot
//! do answered as a 409 that names it.

use serde_json::{json, Value};
use sqlx::PgPool;

use crate::support::*;

const CUSTOMERS: &str = r#"{"columns": {"customer_id": "bigint", "name": "text"},
  "primary_key": ["customer_id"], "distribution": {"column": "customer_id"}}"#;

/// Orders kept beside their customer: keyed by customer and order, with
/// their history.
const ORDERS: &str = r#"{"columns": {"customer_id": "bigint", "order_id": "bigint",
  "amount": "numeric", "updated_at": "timestamptz"},
  "primary_key": ["customer_id", "order_id"], "cursor": "updated_at",
  "write_mode": "versions", "history": "scd2",
  "distribution": {"column": "customer_id", "colocate_with": "customers"}}"#;

const COUNTRIES: &str = r#"{"columns": {"code": "text", "name": "text"},
  "primary_key": ["code"], "partition_by": null, "distribution": "reference"}"#;

struct Cluster {
    idem: Idem,
    db: PgPool,
    _database: TestDatabase,
}

async fn cluster(name: &str, env: &[(&str, &str)]) -> Cluster {
    let (options, url, database) = fresh_database_url().await;
    let idem = Idem::start(&url, name, env).await;
    let db = PgPool::connect_with(options).await.unwrap();
    Cluster {
        idem,
        db,
        _database: database,
    }
}

impl Cluster {
    async fn put(&self, path: &str, content_type: &str, body: String) -> (u16, Value) {
        let r = client()
            .put(self.idem.url(path))
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, json_body(r).await)
    }

    async fn declare(&self, table: &str, declaration: &str) -> (u16, Value) {
        let path = format!("/tables/{table}");
        self.put(&path, "application/json", declaration.into())
            .await
    }

    /// Citus's method (`h` hash, `n` reference) and colocation group for
    /// `relation`; none when Citus does not know it (a local table).
    async fn placement(&self, relation: &str) -> Option<(String, i32)> {
        sqlx::query_as(
            "select partmethod::text, colocationid from pg_dist_partition
              where logicalrelid = $1::regclass",
        )
        .bind(relation)
        .fetch_optional(&self.db)
        .await
        .unwrap()
    }
}

#[tokio::test]
async fn declared_tables_their_partitions_and_history_land_where_declared() {
    let c = cluster("citus-declared", &[]).await;
    assert_eq!(c.declare("customers", CUSTOMERS).await.0, 201);
    let (status, orders) = c.declare("orders", ORDERS).await;
    assert_eq!(status, 201, "{orders}");
    assert_eq!(
        orders["distribution"],
        json!({"column": "customer_id", "colocate_with": "customers"})
    );
    assert_eq!(c.declare("countries", COUNTRIES).await.0, 201);

    let day = "{\"customer_id\":7,\"order_id\":1,\"amount\":2.5,\"updated_at\":\"2026-01-01T10:00:00Z\",\"ds\":\"2026-01-01\"}\n\
               {\"customer_id\":8,\"order_id\":2,\"amount\":3,\"updated_at\":\"2026-01-01T11:00:00Z\",\"ds\":\"2026-01-01\"}\n";
    let (status, put) = c
        .put(
            "/partitions/orders/2026-01-01",
            "application/x-ndjson",
            day.into(),
        )
        .await;
    assert_eq!(status, 200, "{put}");
    let (status, ref_put) = c
        .put(
            "/tables/countries/rows",
            "text/csv",
            "code,name\nfr,France\nde,Germany\n".into(),
        )
        .await;
    assert_eq!(status, 200, "{ref_put}");

    let customers = c
        .placement("idem_data.customers")
        .await
        .expect("distributed");
    assert_eq!(customers.0, "h");
    for relation in [
        "idem_data.orders",
        "idem_parts.orders__20260101",
        "idem_history.orders",
    ] {
        assert_eq!(
            c.placement(relation).await,
            Some(customers.clone()),
            "{relation} is hash-distributed beside customers"
        );
    }
    let countries = c.placement("idem_data.countries").await.expect("reference");
    assert_eq!(countries.0, "n");
    let copies: i64 = sqlx::query_scalar(
        "select count(*) from pg_dist_placement p join pg_dist_shard s using (shardid)
          where s.logicalrelid = 'idem_data.countries'::regclass",
    )
    .fetch_one(&c.db)
    .await
    .unwrap();
    assert_eq!(copies, 3, "a copy on the coordinator and on each worker");

    // What was put reads back, and a second PUT of it changes nothing.
    let back = client()
        .get(c.idem.url("/tables/countries/rows"))
        .header("accept", "text/csv")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let mut lines: Vec<&str> = back.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, ["code,name", "de,Germany", "fr,France"]);
    let (_, again) = c.put("/tables/countries/rows", "text/csv", back).await;
    assert_eq!(again["changed"], false, "{again}");
    let history: i64 = sqlx::query_scalar("select count(*) from idem_history.orders")
        .fetch_one(&c.db)
        .await
        .unwrap();
    assert_eq!(history, 2, "each order's first version is in its history");
}

#[tokio::test]
async fn the_server_default_distributes_each_new_table_by_its_key() {
    let c = cluster("citus-default", &[("IDEM_DISTRIBUTION_DEFAULT", "key")]).await;
    let keyed =
        r#"{"columns": {"order_id": "bigint", "note": "text"}, "primary_key": ["order_id"]}"#;
    let plain = r#"{"columns": {"code": "text"}, "primary_key": ["code"], "partition_by": null}"#;
    let local = r#"{"columns": {"n": "bigint"}, "distribution": "local"}"#;
    assert_eq!(
        c.declare("keyed", keyed).await.1["distribution"],
        json!({"column": "order_id"})
    );
    assert_eq!(
        c.declare("plain", plain).await.1["distribution"],
        "reference"
    );
    assert_eq!(c.declare("here", local).await.1["distribution"], "local");
    // A table a first write makes has no key: distributed by its rows' ids.
    put_one_order(&c.idem, "inferred").await;
    let inferred = client()
        .get(c.idem.url("/tables/inferred"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        json_body(inferred).await["distribution"],
        json!({"column": "_row_id"})
    );
    assert_eq!(c.placement("idem_data.keyed").await.unwrap().0, "h");
    assert_eq!(c.placement("idem_data.inferred").await.unwrap().0, "h");
    assert_eq!(c.placement("idem_data.plain").await.unwrap().0, "n");
    assert_eq!(c.placement("idem_data.here").await, None);
}

#[tokio::test]
async fn a_distribution_changes_while_the_table_is_empty_and_not_after() {
    let c = cluster("citus-change", &[]).await;
    let local = r#"{"columns": {"order_id": "bigint", "note": "text"}, "primary_key": ["order_id"],
      "distribution": "local"}"#;
    let hashed = r#"{"columns": {"order_id": "bigint", "note": "text"}, "primary_key": ["order_id"],
      "distribution": {"column": "order_id"}}"#;
    assert_eq!(c.declare("orders", local).await.0, 201);
    let (status, changed) = c.declare("orders", hashed).await;
    assert_eq!(status, 200, "{changed}");
    assert_eq!(
        changed["changes"],
        json!([{"change": "set_distribution", "distribution": {"column": "order_id"}}])
    );
    assert_eq!(c.placement("idem_data.orders").await.unwrap().0, "h");

    put_one_order(&c.idem, "orders").await;
    let (status, refused) = c.declare("orders", local).await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["code"], "citus_unsupported");
    assert!(
        refused["detail"].as_str().unwrap().contains("holds 1 rows"),
        "{refused}"
    );
    assert_eq!(
        c.placement("idem_data.orders").await.unwrap().0,
        "h",
        "left as it was"
    );
}

#[tokio::test]
async fn what_citus_cannot_do_is_a_409_that_names_it() {
    let c = cluster("citus-refusals", &[]).await;
    assert_eq!(c.declare("customers", CUSTOMERS).await.0, 201);
    // Colocated tables share their distribution column's type.
    let text_key = r#"{"columns": {"code": "text"}, "primary_key": ["code"],
      "distribution": {"column": "code", "colocate_with": "customers"}}"#;
    let (status, refused) = c.declare("codes", text_key).await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["code"], "citus_unsupported");
    assert!(
        refused["detail"].as_str().unwrap().contains("one type"),
        "{refused}"
    );
    // A distribution column's type does not change under Citus.
    let wider = CUSTOMERS.replace(r#""customer_id": "bigint""#, r#""customer_id": "numeric""#);
    let (status, refused) = c.declare("customers", &wider).await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["code"], "citus_unsupported");
    assert!(
        refused["detail"]
            .as_str()
            .unwrap()
            .contains("distribution column"),
        "{refused}"
    );
}
