//! `fs ls ID [PATH]`: `GET /v1/sandboxes/{id}/fs/dir?path=PATH` (default `/`). Prints a
//! table `MODE SIZE MTIME NAME`, directories with a trailing `/`, mtime as RFC 3339 UTC.

use crate::commands::{print_json, Ctx};
use crate::error::Result;
use crate::output;
use clap::Args;
use pandastack_api::{DirListing, FileInfo};

/// Flags of `fs ls`.
#[derive(Debug, Clone, Args)]
pub struct LsArgs {
    /// The sandbox id.
    #[arg(value_name = "SANDBOX_ID")]
    pub id: String,
    /// Directory to list.
    #[arg(value_name = "PATH")]
    pub path: Option<String>,
}

/// Unix seconds as `YYYY-MM-DDTHH:MM:SSZ` (days-from-civil, proleptic Gregorian).
pub fn rfc3339(secs: i64) -> String {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// One table row of a directory entry.
pub fn row(f: &FileInfo) -> Vec<String> {
    let name = if f.is_dir {
        format!("{}/", f.name)
    } else {
        f.name.clone()
    };
    vec![f.mode.clone(), f.size.to_string(), rfc3339(f.mtime), name]
}

/// Lists the directory.
pub fn run(args: &LsArgs, ctx: &Ctx) -> Result<()> {
    let path = args.path.clone().unwrap_or_else(|| "/".into());
    let client = ctx.client()?;
    let sandbox = ctx.block(client.sandboxes().get(&args.id))?;
    let entries = ctx.block(sandbox.files().list(&path))?;
    let listing = DirListing { path, entries };
    if ctx.json() {
        return print_json(&listing);
    }
    output::table(
        &["MODE", "SIZE", "MTIME", "NAME"],
        &listing.entries.iter().map(row).collect::<Vec<_>>(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_seconds_to_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_735_689_599), "2024-12-31T23:59:59Z");
    }
}
