//! A value lands in Postgres as Postgres itself reads the same text.
//!
//! Random numerics, timestamps, dates, texts and JSON documents, among them
//! values at, just short of and just past each of Postgres's limits, go
//! through idem's `RowEncoder` into binary COPY data and into a table. Each
//! is then compared in SQL with its text as Postgres parses it
//! (`::numeric`, `::timestamptz`, `::date`, `::jsonb`, text): idem refuses
//! exactly what Postgres refuses, and what it takes is stored with the same
//! value and the same display (a numeric's scale included).
//!
//! The cases come from a fixed seed, so a run is repeatable;
//! `PROPTEST_RNG_SEED` and `PROPTEST_CASES` explore further.

use std::borrow::Cow;
use std::fmt::{self, Write};

use chrono::NaiveDate;
use idem::ingest::encode::{COPY_BINARY_HEADER, COPY_BINARY_TRAILER};
use idem::ingest::{EncodeOptions, ErrorLog, RawField, RawRecord, RowEncoder};
use idem::schema::{TableDeclaration, TableDef};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
use sqlx::PgPool;

use crate::support::fresh_database;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ty {
    Numeric,
    Timestamptz,
    Date,
    Text,
    Jsonb,
}

impl Ty {
    fn column(self) -> &'static str {
        match self {
            Ty::Numeric => "n",
            Ty::Timestamptz => "t",
            Ty::Date => "d",
            Ty::Text => "s",
            Ty::Jsonb => "j",
        }
    }

    fn sql(self) -> &'static str {
        match self {
            Ty::Numeric => "numeric",
            Ty::Timestamptz => "timestamptz",
            Ty::Date => "date",
            Ty::Text => "text",
            Ty::Jsonb => "jsonb",
        }
    }
}

/// One value as text, and for one near a limit whether Postgres holds it.
#[derive(Clone)]
struct Case {
    ty: Ty,
    text: String,
    held: Option<bool>,
}

/// A value of 100,000 digits would bury a failure report.
fn abbreviated(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= 80 {
        return format!("{text:?}");
    }
    let head: String = chars[..40].iter().collect();
    let tail: String = chars[chars.len() - 20..].iter().collect();
    format!("{head:?}…{tail:?} ({} chars)", chars.len())
}

impl fmt::Debug for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.ty.sql(), abbreviated(&self.text))?;
        match self.held {
            Some(true) => write!(f, " (at a limit)"),
            Some(false) => write!(f, " (past a limit)"),
            None => Ok(()),
        }
    }
}

fn ordinary(ty: Ty, text: String) -> Case {
    Case {
        ty,
        text,
        held: None,
    }
}

fn sign() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just(""), Just("-"), Just("+")]
}

/// `[+-]digits[.digits][e[+-]digits]` with few digits, and NaN.
fn decimal() -> BoxedStrategy<String> {
    let exponent = ("[eE]", "[+-]?", "0{0,2}", 0u32..60)
        .prop_map(|(e, sign, zeros, magnitude)| format!("{e}{sign}{zeros}{magnitude}"));
    let number = (
        sign(),
        "[0-9]{0,24}",
        proptest::option::of("[0-9]{0,24}"),
        proptest::option::of(exponent),
    )
        .prop_filter("a decimal has a digit", |(_, int, frac, _)| {
            !int.is_empty() || frac.as_ref().is_some_and(|f| !f.is_empty())
        })
        .prop_map(|(sign, int, frac, exponent)| {
            let frac = frac.map(|f| format!(".{f}")).unwrap_or_default();
            format!("{sign}{int}{frac}{}", exponent.unwrap_or_default())
        });
    prop_oneof![20 => number, 1 => Just("NaN".to_string()), 1 => Just("nan".to_string())].boxed()
}

fn timestamp() -> impl Strategy<Value = String> {
    let offset = prop_oneof![
        Just(String::new()),
        Just("Z".to_string()),
        Just("z".to_string()),
        ("[+-]", 0u32..=15, 0u32..60).prop_map(|(s, h, m)| format!("{s}{h:02}:{m:02}")),
        ("[+-]", 0u32..=15, 0u32..60).prop_map(|(s, h, m)| format!("{s}{h:02}{m:02}")),
        ("[+-]", 0u32..=15).prop_map(|(s, h)| format!("{s}{h:02}")),
    ];
    let second = prop_oneof![20 => 0u32..60, 1 => Just(60u32)];
    // Seconds are optional (`09:00+02`); a fraction only follows seconds.
    let seconds = prop_oneof![
        5 => (second, "(\\.[0-9]{1,12})?").prop_map(|(s, fraction)| format!(":{s:02}{fraction}")),
        1 => Just(String::new()),
    ];
    (
        (1i32..=9999, 1u32..=12, 1u32..=31),
        "[T ]",
        (0u32..24, 0u32..60),
        seconds,
        offset,
    )
        .prop_map(|((y, mo, d), sep, (h, mi), seconds, offset)| {
            format!("{y:04}-{mo:02}-{d:02}{sep}{h:02}:{mi:02}{seconds}{offset}")
        })
}

fn date() -> impl Strategy<Value = String> {
    (1i32..=9999, 1u32..=12, 1u32..=31).prop_map(|(y, m, d)| format!("{y:04}-{m:02}-{d:02}"))
}

fn text() -> impl Strategy<Value = String> {
    let chars = vec(any::<char>(), 0..30).prop_map(String::from_iter);
    prop_oneof![
        9 => chars.clone(),
        // Postgres's text cannot hold a NUL.
        1 => (chars, any::<prop::sample::Index>()).prop_map(|(s, at)| {
            let mut chars: Vec<char> = s.chars().collect();
            chars.insert(at.index(chars.len() + 1), '\0');
            String::from_iter(chars)
        }),
    ]
}

/// A JSON number, with more digits and larger exponents than a double holds.
fn json_number() -> impl Strategy<Value = String> {
    (
        "-?",
        "0|[1-9][0-9]{0,30}",
        proptest::option::of("[0-9]{1,20}"),
        proptest::option::of(("[eE][+-]?", 0u32..400)),
    )
        .prop_map(|(sign, int, frac, exponent)| {
            let frac = frac.map(|f| format!(".{f}")).unwrap_or_default();
            let exponent = exponent.map(|(e, m)| format!("{e}{m}")).unwrap_or_default();
            format!("{sign}{int}{frac}{exponent}")
        })
}

/// A JSON string, some characters escaped as `\uXXXX` (NUL among them).
fn json_string() -> impl Strategy<Value = String> {
    vec((any::<char>(), any::<bool>()), 0..10).prop_map(|chars| {
        let mut out = String::from("\"");
        for (c, escape) in chars {
            if escape || c < ' ' || c == '"' || c == '\\' {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            } else {
                out.push(c);
            }
        }
        out.push('"');
        out
    })
}

fn json() -> impl Strategy<Value = String> {
    let ws = "[ \t\n\r]{0,2}";
    let leaf = prop_oneof![
        Just("null".to_string()),
        Just("true".to_string()),
        Just("false".to_string()),
        json_number(),
        json_string(),
    ];
    // Keys from a small alphabet repeat, and the last of a repeated key wins.
    let key = prop_oneof![json_string(), "\"[ab]{0,2}\""];
    leaf.prop_recursive(3, 32, 6, move |inner| {
        prop_oneof![
            vec((ws, inner.clone()), 0..6).prop_map(|items| {
                let items: Vec<String> = items.into_iter().map(|(w, v)| w + &v).collect();
                format!("[{}]", items.join(","))
            }),
            vec((key.clone(), ws, inner), 0..6).prop_map(|members| {
                let members: Vec<String> = members
                    .into_iter()
                    .map(|(k, w, v)| format!("{k}{w}:{v}"))
                    .collect();
                format!("{{{}}}", members.join(","))
            }),
        ]
    })
}

fn ordinary_case() -> impl Strategy<Value = Case> {
    prop_oneof![
        decimal().prop_map(|t| ordinary(Ty::Numeric, t)),
        timestamp().prop_map(|t| ordinary(Ty::Timestamptz, t)),
        date().prop_map(|t| ordinary(Ty::Date, t)),
        text().prop_map(|t| ordinary(Ty::Text, t)),
        json().prop_map(|t| ordinary(Ty::Jsonb, t)),
    ]
}

// Postgres's limits; `check` asserts that Postgres's own parser agrees.
const MAX_BEFORE_POINT: usize = 131_072;
const MAX_SCALE: usize = 16_383;
const MAX_EXPONENT: u64 = 1_073_741_822;

/// What a generated near-limit numeric aims at.
#[derive(Clone, Copy, Debug)]
enum Limit {
    /// Digits before the point.
    BeforePoint,
    /// Digits after the point (the display scale).
    Scale,
    /// The exponent of a zero, which Postgres's parser bounds on its own.
    Exponent,
}

/// A numeric at, one short of, or one past a limit (`offset` -1, 0, 1),
/// written in one of the forms that reach it: plainly (after leading zeros,
/// padded with a repeated digit), with an exponent, or with zeros that
/// only look like digits (`0.000123E+131075`; for the scale, trailing zeros).
fn near_limit(limit: Limit, offset: i64, form: u8, significant: &str, filler: char) -> String {
    let at = |max: usize| usize::try_from(i64::try_from(max).unwrap() + offset).unwrap();
    let len = significant.len();
    match (limit, form) {
        (Limit::BeforePoint, 0) => {
            let width = at(MAX_BEFORE_POINT);
            format!("00{significant}{}", filler.to_string().repeat(width - len))
        }
        (Limit::BeforePoint, 1) => format!("{significant}e{}", at(MAX_BEFORE_POINT) - len),
        (Limit::BeforePoint, _) => format!("0.000{significant}E+{}", at(MAX_BEFORE_POINT) + 3),
        (Limit::Scale, 0) => {
            let width = at(MAX_SCALE);
            format!("0.{}{significant}", filler.to_string().repeat(width - len))
        }
        (Limit::Scale, 1) => format!("{significant}e-{}", at(MAX_SCALE)),
        (Limit::Scale, _) => format!("{significant}.{}", "0".repeat(at(MAX_SCALE))),
        (Limit::Exponent, _) => {
            format!(
                "0.{}e{}",
                "0".repeat(usize::from(form)),
                MAX_EXPONENT.saturating_add_signed(offset)
            )
        }
    }
}

fn near_limit_case() -> impl Strategy<Value = Case> {
    let limit = prop_oneof![
        3 => Just(Limit::BeforePoint),
        3 => Just(Limit::Scale),
        1 => Just(Limit::Exponent),
    ];
    (
        limit,
        -1i64..=1,
        0u8..3,
        "[1-9][0-9]{0,6}",
        proptest::char::range('0', '9'),
        sign(),
        any::<bool>(),
    )
        .prop_map(
            |(limit, offset, form, significant, filler, sign, in_json)| {
                let number = near_limit(limit, offset, form, &significant, filler);
                let held = Some(offset <= 0);
                // The exponent form is also a JSON number: jsonb's numbers are
                // numerics, with the same limits.
                if in_json && form == 1 && !matches!(limit, Limit::Exponent) {
                    let sign = if sign == "-" { "-" } else { "" };
                    let text = format!("[{sign}{number}]");
                    return Case {
                        ty: Ty::Jsonb,
                        text,
                        held,
                    };
                }
                let text = format!("{sign}{number}");
                Case {
                    ty: Ty::Numeric,
                    text,
                    held,
                }
            },
        )
}

fn batch() -> impl Strategy<Value = Vec<Case>> {
    (vec(ordinary_case(), 40..120), vec(near_limit_case(), 2..6)).prop_map(
        |(mut cases, near_limits)| {
            cases.extend(near_limits);
            cases
        },
    )
}

const SETUP: &[&str] = &[
    "create table landed (id bigint, ds date, n numeric, t timestamptz, d date, s text, j jsonb,
                          _load_id uuid, _row_id bytea, _row_hash bytea)",
    "create table cases (id bigint primary key, ty text not null, input bytea not null)",
    // Postgres's own reading of a text as a type, as text; null when it
    // refuses it. Bytes, so that a NUL reaches Postgres to be refused.
    "create function pg_reads(ty text, input bytea) returns text
       language plpgsql set timezone = 'UTC' as $$
     declare display text;
     begin
       execute format('select (convert_from($1, ''UTF8'')::%s)::text', ty)
         into strict display using input;
       return display;
     exception when others then
       return null;
     end $$",
];

fn table() -> TableDef {
    serde_json::from_str::<TableDeclaration>(
        r#"{"columns": {"id": "bigint", "ds": "date", "n": "numeric", "t": "timestamptz",
            "d": "date", "s": "text", "j": "jsonb"}, "partition_by": "ds"}"#,
    )
    .unwrap()
    .into_def(idem::names::TableName::parse("landed").unwrap())
    .unwrap()
}

/// The cases as one binary COPY, and idem's verdict on each.
fn encode(def: &TableDef, cases: &[Case]) -> (Vec<u8>, Vec<Result<(), String>>) {
    let options = EncodeOptions {
        allowed: None,
        ds: NaiveDate::from_ymd_opt(2026, 10, 12).map(idem::period::Period::day),
        row_id_scope: None,
        tombstones: false,
        presence: false,
    };
    let mut encoder = RowEncoder::new(def, options, idem::ids::LoadId::NONE);
    let mut copy = COPY_BINARY_HEADER.to_vec();
    let verdicts = cases
        .iter()
        .zip(1u64..)
        .map(|(case, n)| {
            let id = n.to_string();
            let fields = [
                (Cow::Borrowed("id"), RawField::Text(Some(&id))),
                (
                    Cow::Borrowed(case.ty.column()),
                    RawField::Text(Some(&case.text)),
                ),
            ];
            let record = RawRecord {
                line: n,
                record: n,
                row_group: None,
                fields: &fields,
            };
            let mut errors = ErrorLog::default();
            match encoder.encode(&record, &mut copy, &mut errors) {
                Some(_) => Ok(()),
                None => Err(errors.listed[0].message.clone()),
            }
        })
        .collect();
    copy.extend_from_slice(COPY_BINARY_TRAILER);
    (copy, verdicts)
}

/// Lands a batch through idem's encoder and compares each value with
/// Postgres's reading of its text.
async fn check(db: &PgPool, def: &TableDef, cases: &[Case]) -> Result<(), TestCaseError> {
    let (copy, verdicts) = encode(def, cases);
    let mut conn = db.acquire().await.unwrap();
    sqlx::query("truncate landed, cases")
        .execute(&mut *conn)
        .await
        .unwrap();
    let mut copy_in = conn
        .copy_in_raw(
            "copy landed (id, ds, n, t, d, s, j, _load_id, _row_id, _row_hash)
             from stdin with (format binary)",
        )
        .await
        .unwrap();
    copy_in.send(copy).await.unwrap();
    let landed = copy_in.finish().await;
    let accepted = verdicts.iter().filter(|v| v.is_ok()).count();
    prop_assert_eq!(
        landed.map_err(|e| TestCaseError::fail(format!("COPY refused idem's data: {e}")))?,
        u64::try_from(accepted).unwrap()
    );

    let ids: Vec<i64> = (1..).take(cases.len()).collect();
    let tys: Vec<&str> = cases.iter().map(|c| c.ty.sql()).collect();
    let inputs: Vec<&[u8]> = cases.iter().map(|c| c.text.as_bytes()).collect();
    sqlx::query("insert into cases select * from unnest($1::bigint[], $2::text[], $3::bytea[])")
        .bind(&ids)
        .bind(&tys)
        .bind(&inputs)
        .execute(&mut *conn)
        .await
        .unwrap();
    let rows: Vec<(i64, Option<String>, Option<String>)> = sqlx::query_as(
        "select c.id, pg_reads(c.ty, c.input),
                case c.ty when 'numeric' then l.n::text when 'timestamptz' then l.t::text
                          when 'date' then l.d::text when 'text' then l.s
                          when 'jsonb' then l.j::text end
           from cases c left join landed l on l.id = c.id
          order by c.id",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap();

    for ((case, verdict), (_, postgres, stored)) in cases.iter().zip(&verdicts).zip(&rows) {
        let idem_holds = verdict.is_ok();
        prop_assert_eq!(
            idem_holds,
            postgres.is_some(),
            "{:?}: idem {:?}, Postgres's own parser {}",
            case,
            verdict,
            postgres.as_deref().map_or("refuses it".into(), abbreviated)
        );
        if let Some(held) = case.held {
            prop_assert_eq!(idem_holds, held, "{:?}", case);
            if let Err(message) = verdict {
                prop_assert!(message.contains("Postgres"), "{:?}: {}", case, message);
            }
        }
        if idem_holds {
            prop_assert!(
                stored == postgres,
                "{:?}: idem stored {}, Postgres reads {}",
                case,
                stored.as_deref().map_or("nothing".into(), abbreviated),
                postgres.as_deref().map_or("nothing".into(), abbreviated)
            );
        }
    }
    Ok(())
}

fn runner() -> TestRunner {
    let defaults = Config::default();
    let mut config = Config {
        cases: std::env::var_os("PROPTEST_CASES").map_or(64, |_| defaults.cases),
        failure_persistence: None,
        max_shrink_iters: 2_000,
        ..defaults
    };
    if config.rng_seed == RngSeed::Random {
        config.rng_seed = RngSeed::Fixed(0x1de4_c0de);
    }
    TestRunner::new(config)
}

#[test]
fn values_land_as_postgres_reads_their_text() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (db, _database) = rt.block_on(async {
        let (options, database) = fresh_database().await;
        let options = options.options([("timezone", "UTC")]);
        let db = PgPool::connect_with(options).await.unwrap();
        for statement in SETUP {
            sqlx::query(statement).execute(&db).await.unwrap();
        }
        (db, database)
    });
    let def = table();
    let result = runner().run(&batch(), |cases| rt.block_on(check(&db, &def, &cases)));
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[tokio::test]
async fn a_byte_order_mark_before_an_ndjson_or_json_body_is_skipped_as_before_csv() {
    use crate::helpers::spawn_app;
    use crate::support::{json_body, order};
    let app = spawn_app().await;
    app.declare_orders().await;
    let row = order(1, "paid", "2026-10-12T01:00:00Z");
    let bodies = [
        ("application/x-ndjson", format!("\u{feff}{row}\n")),
        ("application/json", format!("\u{feff}[{row}]")),
        (
            "text/csv",
            "\u{feff}order_id,ds\r\n1,2026-10-12\r\n".to_string(),
        ),
    ];
    for (content_type, body) in bodies.clone() {
        let r = app
            .put("/partitions/orders/2026-10-12", content_type, body)
            .await;
        assert_eq!(
            r.status(),
            200,
            "{content_type}: {}",
            r.text().await.unwrap()
        );
    }
    for (i, (content_type, body)) in bodies.into_iter().enumerate() {
        let r = app
            .client
            .post(app.url("/rows?table=orders"))
            .header("content-type", content_type)
            .header("idempotency-key", format!("k{i}"))
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.status(),
            200,
            "{content_type}: {}",
            r.text().await.unwrap()
        );
    }
    // A table nobody declared takes its columns' names without the mark.
    let r = app
        .put(
            "/partitions/fresh/2026-10-12",
            "application/x-ndjson",
            "\u{feff}{\"n\":1}\n",
        )
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let fresh = json_body(app.get("/tables/fresh").await).await;
    assert_eq!(fresh["columns"][0]["name"], "n", "{fresh}");
}
