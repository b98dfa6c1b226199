//! The layout checker run on small planted trees, to show that each rule
//! can fail: a circle through a `mod.rs`, one across folders, an upward
//! import however it is written, the binary's `client/`.

use super::{findings, source, Source};

/// The findings about a planted tree: (path below `src/`, text) pairs.
fn planted(files: &[(&str, &str)]) -> Vec<String> {
    let sources: Vec<Source> = files
        .iter()
        .map(|(path, text)| source(path, text.to_string()))
        .collect();
    findings(&sources)
}

#[test]
fn a_circle_through_a_mod_rs_is_found() {
    let through_mod_rs = [
        ("lib.rs", "pub mod store;\n"),
        (
            "store/mod.rs",
            "mod a;\npub struct Pool;\npub fn open() -> a::Handle { a::Handle }\n",
        ),
        ("store/a.rs", "use super::Pool;\npub struct Handle;\n"),
    ];
    assert_eq!(
        planted(&through_mod_rs),
        ["import circle: store, store::a (store -> store::a; store::a -> store)"]
    );
    // What the children share in a file of their own, the circle is gone.
    let split = [
        ("lib.rs", "pub mod store;\n"),
        (
            "store/mod.rs",
            "mod a;\nmod pool;\npub fn open() -> a::Handle { a::Handle }\n",
        ),
        ("store/pool.rs", "pub struct Pool;\n"),
        ("store/a.rs", "use super::pool::Pool;\npub struct Handle;\n"),
    ];
    assert_eq!(planted(&split), Vec::<String>::new());
}

#[test]
fn a_circle_across_folders_is_found() {
    let found = planted(&[
        (
            "http/auth.rs",
            "use super::console::owns;\npub fn caller() {}\n",
        ),
        (
            "http/console/mod.rs",
            "mod session;\npub fn owns() {}\npub fn router() { session::page() }\n",
        ),
        (
            "http/console/session.rs",
            "fn f() { crate::http::auth::caller() }\n",
        ),
    ]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("import circle: http::auth, http::console, http::console::session")
    );
}

#[test]
fn a_re_export_is_followed_to_its_module() {
    let found = planted(&[
        ("store/mod.rs", "mod a;\nmod b;\npub use a::Handle;\n"),
        ("store/a.rs", "pub struct Handle;\n"),
        ("store/b.rs", "use super::Handle;\nuse super::b::Other;\n"),
    ]);
    assert_eq!(found, Vec::<String>::new());
}

/// An upward import of `pipeline` from `store/x.rs`, written as `import`.
fn store_importing(import: &str) -> Vec<String> {
    planted(&[
        ("pipeline/mod.rs", "pub struct Batch;\n"),
        ("store/mod.rs", "mod x;\n"),
        ("store/x.rs", import),
    ])
}

#[test]
fn an_upward_import_is_found_however_it_is_written() {
    let upward = ["src/store/x.rs imports pipeline, a layer above its own"];
    for import in [
        "use super::super::pipeline::Batch;\n",
        "fn f() -> pipeline::Batch { pipeline::Batch }\n",
        "use crate::{names::TableName, pipeline::Batch};\n",
        "use idem::pipeline as p;\n",
        "#[cfg(test)]\nmod tests {\n    use super::super::super::pipeline::Batch;\n}\n",
    ] {
        assert_eq!(store_importing(import), upward, "{import}");
    }
}

#[test]
fn comments_strings_and_declarations_are_no_imports() {
    let text = "// pipeline::Batch\nconst S: &str = \"pipeline::Batch\";\nconst C: char = '\"';\n\
                /* crate::pipeline::Batch */\nmod pipeline;\n";
    assert_eq!(store_importing(text), Vec::<String>::new());
}

#[test]
fn only_the_binary_reaches_the_client() {
    let found = planted(&[
        ("client/mod.rs", "pub fn send() {}\n"),
        ("cli.rs", "use crate::client::send;\n"),
        ("http/mod.rs", "use crate::client::send;\n"),
    ]);
    assert_eq!(
        found,
        ["src/http/mod.rs imports client, a layer above its own"]
    );
}
