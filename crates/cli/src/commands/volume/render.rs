//! Human output of the volume commands and the `--size` parser. Keys are the JSON field names
//! of [`pandastack_api::Volume`].

use crate::error::Result;
use crate::output;
use pandastack_api::Volume;

/// Prints one volume as `key  value` lines.
pub fn print_one(v: &Volume) -> Result<()> {
    output::pairs(&[
        ("id", v.id.clone()),
        ("name", v.name.clone()),
        ("size", format!("{} MiB", v.size_mb)),
        ("used", output::bytes(v.used_bytes)),
        ("attached_to", attached(v)),
        ("created_at", v.created_at.clone()),
    ])
}

/// Table headers of [`row`].
pub const HEADERS: [&str; 4] = ["NAME", "SIZE", "USED", "ATTACHED TO"];

/// One table row.
pub fn row(v: &Volume) -> Vec<String> {
    vec![
        v.name.clone(),
        format!("{} MiB", v.size_mb),
        output::bytes(v.used_bytes),
        attached(v),
    ]
}

/// The holders: `-`, `SANDBOX`, or `SANDBOX (ro), ...` for read-only ones.
fn attached(v: &Volume) -> String {
    if v.attachments.is_empty() {
        return "-".into();
    }
    v.attachments
        .iter()
        .map(|a| {
            if a.read_only {
                format!("{} (ro)", a.sandbox_id)
            } else {
                a.sandbox_id.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A `--size`: MiB as a plain number, or with a unit `m`/`mb`/`mib`, `g`/`gb`/`gib`, `t`
/// (`8g` = 8192). Units are binary: volumes are sized in MiB.
///
/// # Errors
/// A message naming the value when it is not such a size or is 0.
pub fn size_mb(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("'{s}' is not a size (e.g. 512m, 8g)"))?;
    let factor = match unit.trim() {
        "" | "m" | "mb" | "mib" => 1,
        "g" | "gb" | "gib" => 1024,
        "t" | "tb" | "tib" => 1024 * 1024,
        _ => return Err(format!("'{s}': unknown unit (use m or g, e.g. 8g)")),
    };
    match n.checked_mul(factor) {
        Some(mb) if mb > 0 => Ok(mb),
        _ => Err(format!("'{s}' is not a size above 0")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_mib() {
        assert_eq!(size_mb("8g"), Ok(8192));
        assert_eq!(size_mb("16G"), Ok(16384));
        assert_eq!(size_mb("512m"), Ok(512));
        assert_eq!(size_mb("256"), Ok(256));
        assert_eq!(size_mb("1 GiB"), Ok(1024));
        assert!(size_mb("0").is_err());
        assert!(size_mb("8x").is_err());
        assert!(size_mb("g").is_err());
        assert!(size_mb("-1g").is_err());
    }

    #[test]
    fn holders_are_listed_with_their_mode() {
        let v = Volume {
            id: "vol-1".into(),
            name: "cache".into(),
            size_mb: 1024,
            used_bytes: 0,
            created_at: "2026-01-01T00:00:00Z".into(),
            attached_to: Some("sb-1".into()),
            attachments: vec![
                pandastack_api::VolumeAttachment {
                    sandbox_id: "sb-1".into(),
                    read_only: true,
                },
                pandastack_api::VolumeAttachment {
                    sandbox_id: "sb-2".into(),
                    read_only: true,
                },
            ],
        };
        assert_eq!(row(&v)[3], "sb-1 (ro), sb-2 (ro)");
    }
}
