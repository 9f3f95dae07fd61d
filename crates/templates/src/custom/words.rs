//! Docker's word processing for instruction arguments (`ENV`, `ARG`, `WORKDIR`, `USER`,
//! `COPY`/`ADD`, `FROM`): variable substitution, quotes and backslash escapes.
//!
//! Supported forms: `$NAME`, `${NAME}`, `${NAME:-word}` / `${NAME-word}` (default when unset or
//! empty / unset), `${NAME:+word}` / `${NAME+word}` (replacement when set and not empty / set).
//! Single quotes are literal; double quotes allow substitution and the escapes `\"`, `\\`, `\$`;
//! outside quotes a backslash escapes the next character. `RUN` is not processed here: its shell
//! does that, with the build's variables in its environment.

/// Looks a variable up: `Some(value)` when set (possibly empty).
pub type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Splits `input` into words on unquoted whitespace, after substitution and quote removal.
///
/// # Errors
/// A short message for an unterminated quote or `${`, or a bad variable name in `${...}`.
pub fn split(input: &str, env: Lookup<'_>) -> Result<Vec<String>, String> {
    process(input, env, true)
}

/// Processes `input` as one word (whitespace kept): `WORKDIR /my dir`, `USER`.
///
/// # Errors
/// As [`split`].
pub fn single(input: &str, env: Lookup<'_>) -> Result<String, String> {
    Ok(process(input.trim(), env, false)?.join(""))
}

fn process(input: &str, env: Lookup<'_>, split: bool) -> Result<Vec<String>, String> {
    let chars: Vec<char> = input.chars().collect();
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            c if split && c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
                i += 1;
            }
            '\\' => {
                in_word = true;
                match chars.get(i + 1) {
                    Some(&next) => word.push(next),
                    None => word.push('\\'),
                }
                i += 2;
            }
            '\'' => {
                in_word = true;
                let end = find(&chars, i + 1, '\'').ok_or("unterminated single quote")?;
                word.extend(&chars[i + 1..end]);
                i = end + 1;
            }
            '"' => {
                in_word = true;
                i = double_quoted(&chars, i + 1, env, &mut word)?;
            }
            '$' => {
                // As in a shell, an unquoted expansion that yields nothing makes no word.
                let before = word.len();
                i = dollar(&chars, i, env, &mut word)?;
                in_word |= word.len() > before;
            }
            c => {
                in_word = true;
                word.push(c);
                i += 1;
            }
        }
    }
    if in_word || !split {
        words.push(word);
    }
    Ok(words)
}

/// Reads a double-quoted run starting after the opening quote; returns the index after the
/// closing one.
fn double_quoted(
    chars: &[char],
    mut i: usize,
    env: Lookup<'_>,
    out: &mut String,
) -> Result<usize, String> {
    while i < chars.len() {
        match chars[i] {
            '"' => return Ok(i + 1),
            '\\' if matches!(chars.get(i + 1), Some('"' | '\\' | '$')) => {
                out.push(chars[i + 1]);
                i += 2;
            }
            '$' => i = dollar(chars, i, env, out)?,
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Err("unterminated double quote".into())
}

/// Expands the `$...` at `chars[i]`; returns the index after it. A `$` not followed by a name
/// or `{` stays a literal `$`.
fn dollar(chars: &[char], i: usize, env: Lookup<'_>, out: &mut String) -> Result<usize, String> {
    match chars.get(i + 1) {
        Some('{') => {
            let end = closing_brace(chars, i + 2).ok_or("unterminated ${")?;
            let inner: String = chars[i + 2..end].iter().collect();
            out.push_str(&braced(&inner, env)?);
            Ok(end + 1)
        }
        Some(&c) if c == '_' || c.is_ascii_alphabetic() => {
            let mut j = i + 1;
            while j < chars.len() && (chars[j] == '_' || chars[j].is_ascii_alphanumeric()) {
                j += 1;
            }
            let name: String = chars[i + 1..j].iter().collect();
            out.push_str(&env(&name).unwrap_or_default());
            Ok(j)
        }
        _ => {
            out.push('$');
            Ok(i + 1)
        }
    }
}

/// `NAME`, `NAME:-word`, `NAME-word`, `NAME:+word`, `NAME+word`.
fn braced(inner: &str, env: Lookup<'_>) -> Result<String, String> {
    let name_end = inner
        .find(|c: char| !(c == '_' || c.is_ascii_alphanumeric()))
        .unwrap_or(inner.len());
    let (name, rest) = inner.split_at(name_end);
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(format!("bad substitution ${{{inner}}}"));
    }
    let value = env(name);
    let (op, word) = if let Some(w) = rest.strip_prefix(":-") {
        (":-", w)
    } else if let Some(w) = rest.strip_prefix(":+") {
        (":+", w)
    } else if let Some(w) = rest.strip_prefix('-') {
        ("-", w)
    } else if let Some(w) = rest.strip_prefix('+') {
        ("+", w)
    } else if rest.is_empty() {
        return Ok(value.unwrap_or_default());
    } else {
        return Err(format!("bad substitution ${{{inner}}}"));
    };
    let word = || single(word, env);
    Ok(match op {
        ":-" => match value {
            Some(v) if !v.is_empty() => v,
            _ => word()?,
        },
        "-" => match value {
            Some(v) => v,
            None => word()?,
        },
        ":+" => match value {
            Some(v) if !v.is_empty() => word()?,
            _ => String::new(),
        },
        _ => match value {
            Some(_) => word()?,
            None => String::new(),
        },
    })
}

fn find(chars: &[char], from: usize, target: char) -> Option<usize> {
    (from..chars.len()).find(|&j| chars[j] == target)
}

/// The `}` closing a `${` whose content starts at `from`, allowing nested `${...}`.
fn closing_brace(chars: &[char], from: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut j = from;
    while j < chars.len() {
        match chars[j] {
            '$' if chars.get(j + 1) == Some(&'{') => {
                depth += 1;
                j += 2;
                continue;
            }
            '}' if depth == 0 => return Some(j),
            '}' => depth -= 1,
            _ => {}
        }
        j += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn env() -> BTreeMap<String, String> {
        [("A", "1"), ("EMPTY", ""), ("PATH", "/usr/bin")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn sp(s: &str) -> Vec<String> {
        let e = env();
        split(s, &|k| e.get(k).cloned()).expect("valid")
    }

    #[test]
    fn substitution_forms() {
        assert_eq!(sp("$A ${A} x${A}y"), ["1", "1", "x1y"]);
        assert_eq!(
            sp("${MISSING:-d} ${EMPTY:-d} ${EMPTY-d} ${MISSING-d}"),
            ["d", "d", "d"]
        );
        assert_eq!(
            sp("${A:+set} ${EMPTY:+set}${EMPTY+e} ${MISSING+m}"),
            ["set", "e"]
        );
        assert_eq!(sp("/opt/bin:$PATH"), ["/opt/bin:/usr/bin"]);
        assert_eq!(sp("${MISSING:-${A}}"), ["1"]);
        assert_eq!(sp("cost $5 $"), ["cost", "$5", "$"]);
    }

    #[test]
    fn quotes_and_escapes() {
        assert_eq!(
            sp(r#"'$A b' "$A b" \$A a\ b"#),
            ["$A b", "1 b", "$A", "a b"]
        );
        assert_eq!(sp(r#""say \"hi\" \\ \n""#), [r#"say "hi" \ \n"#]);
        assert_eq!(sp(r#"a="" b=''"#), ["a=", "b="]);
        let e = env();
        assert_eq!(
            single("  /my dir/$A ", &|k| e.get(k).cloned()).unwrap(),
            "/my dir/1"
        );
    }

    #[test]
    fn errors_are_reported() {
        let e = env();
        let look = |k: &str| e.get(k).cloned();
        assert!(split("'open", &look).is_err());
        assert!(split("\"open", &look).is_err());
        assert!(split("${A", &look).is_err());
        assert!(split("${1A}", &look).is_err());
        assert!(split("${A?x}", &look).is_err());
    }
}
