//! A jsonb value's canonical text: compact, object keys sorted and unique
//! (the last of a repeated key wins, as in jsonb), strings escaped as
//! serde_json escapes them, and numbers as Postgres displays them. jsonb
//! keeps a number as a numeric, exactly, so a number must not pass through a
//! double on its way (serde_json's `Value` would round `0.1234567890123456789`
//! and turn `1e-400` into `0.0`), it must fit Postgres's numeric, and it is
//! written as the numeric is displayed (`1e2` as `100`, `1.50` as `1.50`), so
//! that documents Postgres stores alike encode alike.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::de::IgnoredAny;

use super::numeric::{numeric_limits, write_numeric_canonical};
use super::text::{json_str, NUL_REFUSED};

/// How deep a document may nest: serde_json's own limit, which jsonb values
/// went through before they were canonicalized here.
const MAX_DEPTH: usize = 128;

/// `text`, a JSON document, in canonical form; or why Postgres would refuse it.
pub fn canonical(text: &str) -> Result<String, String> {
    // serde_json checks the syntax; the scan below then only splits.
    serde_json::from_str::<IgnoredAny>(text).map_err(|e| format!("invalid JSON: {e}"))?;
    let mut scan = Scan { text, at: 0 };
    let value = scan.value(0)?;
    let mut out = Vec::with_capacity(text.len());
    value.write(&mut out)?;
    // Every piece written is JSON text, or serde_json's output: UTF-8.
    String::from_utf8(out).map_err(|e| e.to_string())
}

/// A document split into its values, in one pass; literals keep their
/// text, numbers take their canonical one.
enum Value<'a> {
    Verbatim(Cow<'a, str>),
    Str(Cow<'a, str>),
    Array(Vec<Value<'a>>),
    Object(BTreeMap<Cow<'a, str>, Value<'a>>),
}

impl Value<'_> {
    fn write(&self, out: &mut Vec<u8>) -> Result<(), String> {
        match self {
            Value::Verbatim(text) => out.extend_from_slice(text.as_bytes()),
            Value::Str(s) => write_str(s, out)?,
            Value::Array(items) => {
                out.push(b'[');
                for (n, item) in items.iter().enumerate() {
                    if n > 0 {
                        out.push(b',');
                    }
                    item.write(out)?;
                }
                out.push(b']');
            }
            Value::Object(members) => {
                out.push(b'{');
                for (n, (key, value)) in members.iter().enumerate() {
                    if n > 0 {
                        out.push(b',');
                    }
                    write_str(key, out)?;
                    out.push(b':');
                    value.write(out)?;
                }
                out.push(b'}');
            }
        }
        Ok(())
    }
}

fn write_str(s: &str, out: &mut Vec<u8>) -> Result<(), String> {
    serde_json::to_writer(&mut *out, s).map_err(|e| e.to_string())
}

/// A cursor over a document serde_json has found valid.
struct Scan<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Scan<'a> {
    fn peek(&mut self) -> Option<u8> {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.text.as_bytes().get(self.at) {
            self.at += 1;
        }
        self.text.as_bytes().get(self.at).copied()
    }

    /// Consumes `byte`, the next one after whitespace.
    fn eat(&mut self, byte: u8) -> bool {
        let found = self.peek() == Some(byte);
        self.at += usize::from(found);
        found
    }

    fn broken(&self) -> String {
        format!("invalid JSON at byte {}", self.at)
    }

    fn value(&mut self, depth: usize) -> Result<Value<'a>, String> {
        match self.peek() {
            Some(b'[' | b'{') if depth == MAX_DEPTH => Err(format!(
                "invalid JSON: nested deeper than {MAX_DEPTH} levels"
            )),
            Some(b'[') => self.array(depth + 1),
            Some(b'{') => self.object(depth + 1),
            Some(b'"') => self.string().map(Value::Str),
            Some(_) => self.verbatim(),
            None => Err(self.broken()),
        }
    }

    fn array(&mut self, depth: usize) -> Result<Value<'a>, String> {
        self.eat(b'[');
        let mut items = Vec::new();
        if self.eat(b']') {
            return Ok(Value::Array(items));
        }
        loop {
            items.push(self.value(depth)?);
            if self.eat(b']') {
                return Ok(Value::Array(items));
            }
            if !self.eat(b',') {
                return Err(self.broken());
            }
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value<'a>, String> {
        self.eat(b'{');
        let mut members = BTreeMap::new();
        if self.eat(b'}') {
            return Ok(Value::Object(members));
        }
        loop {
            if self.peek() != Some(b'"') {
                return Err(self.broken());
            }
            let key = self.string()?;
            if !self.eat(b':') {
                return Err(self.broken());
            }
            members.insert(key, self.value(depth)?);
            if self.eat(b'}') {
                return Ok(Value::Object(members));
            }
            if !self.eat(b',') {
                return Err(self.broken());
            }
        }
    }

    /// A string's value, at its opening quote.
    fn string(&mut self) -> Result<Cow<'a, str>, String> {
        let bytes = self.text.as_bytes();
        let start = self.at;
        self.at += 1;
        loop {
            match bytes.get(self.at) {
                None => return Err(self.broken()),
                Some(b'\\') => self.at += 2,
                Some(b'"') => break,
                Some(_) => self.at += 1,
            }
        }
        self.at += 1;
        let raw = self.text.get(start..self.at).ok_or_else(|| self.broken())?;
        let value = json_str(raw)?;
        if value.contains('\0') {
            return Err(NUL_REFUSED.into());
        }
        Ok(value)
    }

    /// A number, `true`, `false` or `null`: up to the next delimiter.
    fn verbatim(&mut self) -> Result<Value<'a>, String> {
        let bytes = self.text.as_bytes();
        let start = self.at;
        while bytes
            .get(self.at)
            .is_some_and(|b| !b" \t\n\r,]}".contains(b))
        {
            self.at += 1;
        }
        let text = self.text.get(start..self.at).ok_or_else(|| self.broken())?;
        if !text.starts_with(['-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9']) {
            return Ok(Value::Verbatim(Cow::Borrowed(text)));
        }
        numeric_limits(text).map_err(|why| format!("a number in the document: {why}"))?;
        let mut plain = Vec::with_capacity(text.len());
        write_numeric_canonical(&mut plain, text);
        String::from_utf8(plain)
            .map(|plain| Value::Verbatim(Cow::Owned(plain)))
            .map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_written_as_postgres_displays_them_within_its_limits() {
        assert_eq!(
            canonical("[1.50, 123456789012345678901234567890, 1e30, 1e-30, -0, -0.00, 1e400]")
                .unwrap(),
            format!(
                "[1.50,123456789012345678901234567890,1{},0.{}1,0,0.00,1e400]",
                "0".repeat(30),
                "0".repeat(29)
            )
        );
        // As Postgres prints `'{"a":1e2,"b":1.0E+2}'::jsonb`: `{"a": 100, "b": 100}`.
        assert_eq!(
            canonical(r#"{"b":1.0E+2,"a":1e2}"#).unwrap(),
            r#"{"a":100,"b":100}"#
        );
        assert_eq!(canonical(" 1E+5 ").unwrap(), "100000");
        assert!(canonical("[1e131071]").is_ok());
        let err = canonical(r#"{"a": [1e131072]}"#).unwrap_err();
        assert!(err.contains("131073 digits before the point"), "{err}");
        let err = canonical("1e-16384").unwrap_err();
        assert!(err.contains("16384 digits after the point"), "{err}");
    }

    #[test]
    fn keys_are_sorted_and_unique_and_strings_escaped_alike() {
        assert_eq!(
            canonical(r#"{"b":"\u00e9", "a":[true,null,{}], "b":"x\/y\"", "":[]}"#).unwrap(),
            r#"{"":[],"a":[true,null,{}],"b":"x/y\""}"#
        );
        assert_eq!(canonical(r#"["a\\u0000"]"#).unwrap(), r#"["a\\u0000"]"#);
    }

    #[test]
    fn nul_is_refused_in_strings_and_keys() {
        assert!(canonical(r#"["\u0000"]"#).is_err());
        assert!(canonical(r#"{"\u0000":1}"#).is_err());
    }

    #[test]
    fn broken_or_too_deep_documents_are_refused_without_recursing() {
        assert!(canonical("[1,]").unwrap_err().starts_with("invalid JSON"));
        assert!(canonical(r#"{"a" 1}"#).is_err());
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let err = canonical(&deep).unwrap_err();
        assert!(err.contains("nested deeper than 128"), "{err}");
        let ok = format!("{}{}", "[".repeat(128), "]".repeat(128));
        assert!(canonical(&ok).is_ok());
    }
}
