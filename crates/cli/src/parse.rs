//! Small parsers shared by commands: `KEY=VALUE` flags (`--metadata`, `--env`), Python's
//! `shlex.quote` (for `run-code`, contract §2.2), and the command text after `--`.

use std::collections::BTreeMap;

/// One `KEY=VALUE` flag value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    /// Text before the first `=`; never empty.
    pub key: String,
    /// Text after the first `=`; may be empty or contain `=`.
    pub value: String,
}

/// Parses `KEY=VALUE` (split at the first `=`), as a clap `value_parser`.
///
/// Errors: no `=`, an empty key, or a NUL byte anywhere.
pub fn key_value(s: &str) -> Result<KeyValue, String> {
    let (key, value) = s
        .split_once('=')
        .ok_or_else(|| format!("'{s}' is not KEY=VALUE"))?;
    if key.trim().is_empty() {
        return Err(format!("'{s}' has an empty key"));
    }
    if s.contains('\0') {
        return Err(format!("'{}' contains a NUL byte", s.replace('\0', "\\0")));
    }
    Ok(KeyValue {
        key: key.to_string(),
        value: value.to_string(),
    })
}

/// Collects flag values into a map (a repeated key keeps its last value); `None` when empty,
/// so that the key is left out of the request body.
pub fn to_map(pairs: &[KeyValue]) -> Option<BTreeMap<String, String>> {
    if pairs.is_empty() {
        return None;
    }
    Some(
        pairs
            .iter()
            .map(|kv| (kv.key.clone(), kv.value.clone()))
            .collect(),
    )
}

/// Python's `shlex.quote`: unchanged when made only of `[A-Za-z0-9_@%+=:,./-]`, `''` when
/// empty, otherwise wrapped in single quotes with each `'` written as `'"'"'`. The same bytes
/// the Python SDK's `run_code` sends.
pub fn shell_quote(s: &str) -> String {
    if s.is_empty() {
        return "''".into();
    }
    let safe = |c: char| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c);
    if s.chars().all(safe) {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', "'\"'\"'"))
}

/// The command after `--`: one argument is used verbatim (the seed form `-- 'python -c ...'`);
/// several are joined with single spaces, as `ssh` does.
pub fn command_text(args: &[String]) -> String {
    args.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_value_splits_at_first_equals() {
        assert_eq!(
            key_value("job=demo"),
            Ok(KeyValue {
                key: "job".into(),
                value: "demo".into()
            })
        );
        assert_eq!(
            key_value("a=b=c"),
            Ok(KeyValue {
                key: "a".into(),
                value: "b=c".into()
            })
        );
        assert_eq!(
            key_value("empty="),
            Ok(KeyValue {
                key: "empty".into(),
                value: String::new()
            })
        );
    }

    #[test]
    fn key_value_rejects_bad_input() {
        assert!(key_value("novalue").is_err());
        assert!(key_value("=v").is_err());
        assert!(key_value("a=\0").is_err());
    }

    #[test]
    fn to_map_last_wins_and_empty_is_none() {
        let kv = |k: &str, v: &str| KeyValue {
            key: k.into(),
            value: v.into(),
        };
        let m = to_map(&[kv("a", "1"), kv("b", "2"), kv("a", "3")]).unwrap_or_default();
        assert_eq!(m.get("a").map(String::as_str), Some("3"));
        assert_eq!(m.len(), 2);
        assert_eq!(to_map(&[]), None);
    }

    #[test]
    fn shell_quote_matches_python_shlex() {
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("abc/d.e-f_g@h%+=:,"), "abc/d.e-f_g@h%+=:,");
        assert_eq!(shell_quote("x = 42; print(x)"), "'x = 42; print(x)'");
        assert_eq!(shell_quote("print('hi')"), "'print('\"'\"'hi'\"'\"')'");
        assert_eq!(shell_quote("héllo"), "'héllo'");
    }

    #[test]
    fn command_text_joins_like_ssh() {
        assert_eq!(
            command_text(&["python -c \"print(2 + 2)\"".into()]),
            "python -c \"print(2 + 2)\""
        );
        assert_eq!(
            command_text(&["ls".into(), "-la".into(), "/".into()]),
            "ls -la /"
        );
    }
}
