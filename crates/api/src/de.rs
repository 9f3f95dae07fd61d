//! Integers as JSON numbers: JSON has one number type, and JSON Schema's `integer` includes
//! `12.0`, so a body field typed as an integer takes any number with no fractional part that fits.

use serde::de::{Deserializer, Error};
use serde::Deserialize;

fn integral<E: Error>(v: serde_json::Number) -> Result<i128, E> {
    if let Some(i) = v.as_i64() {
        return Ok(i.into());
    }
    if let Some(u) = v.as_u64() {
        return Ok(u.into());
    }
    match v.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 1e30 => Ok(f as i128),
        _ => Err(E::custom(format!(
            "invalid value: {v}, expected an integer"
        ))),
    }
}

/// An optional integer of type `T` (`null` or absent: `None`).
pub fn opt_int<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<i128>,
{
    match Option::<serde_json::Number>::deserialize(d)? {
        None => Ok(None),
        Some(n) => {
            let shown = n.to_string();
            let i = integral::<D::Error>(n)?;
            T::try_from(i)
                .map(Some)
                .map_err(|_| D::Error::custom(format!("invalid value: {shown}, out of range")))
        }
    }
}

/// A required integer of type `T`.
pub fn int<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<i128>,
{
    opt_int(d)?.ok_or_else(|| D::Error::custom("invalid type: null, expected an integer"))
}

#[cfg(test)]
mod tests {
    #[derive(Debug, serde::Deserialize)]
    struct T {
        #[serde(default, deserialize_with = "super::opt_int")]
        n: Option<u64>,
        #[serde(deserialize_with = "super::int")]
        c: usize,
    }

    fn parse(s: &str) -> Result<T, serde_json::Error> {
        serde_json::from_str(s)
    }

    #[test]
    fn integral_numbers_of_any_spelling() {
        let t = parse(r#"{"n": 12.0, "c": 3}"#).unwrap();
        assert_eq!((t.n, t.c), (Some(12), 3));
        assert_eq!(parse(r#"{"n": null, "c": 1e2}"#).unwrap().n, None);
        assert_eq!(parse(r#"{"c": 1e2}"#).unwrap().c, 100);
        assert!(parse(r#"{"n": 1.5, "c": 1}"#)
            .unwrap_err()
            .to_string()
            .contains("expected an integer"));
        assert!(parse(r#"{"n": -1, "c": 1}"#)
            .unwrap_err()
            .to_string()
            .contains("out of range"));
        assert!(parse(r#"{"n": "3", "c": 1}"#).is_err());
        assert!(parse(r#"{"c": null}"#).is_err());
    }
}
