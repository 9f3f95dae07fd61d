//! How results become MCP content: a cell's images as image content (base64 PNG/JPEG, seed 004
//! "a chart comes back as a base64 PNG ... ready to send to the model"), HTML tables and text as
//! text; files as text when they are UTF-8, images as image content, other bytes as an embedded
//! base64 resource; everything else as pretty JSON text.

use base64::Engine as _;
use pandastack_sdk::api::Execution;
use rmcp::model::{ContentBlock, ResourceContents};
use std::collections::BTreeMap;

/// The content of one result bundle: the richest representation a model can use.
fn result_block(bundle: &BTreeMap<String, String>) -> Option<ContentBlock> {
    for mime in ["image/png", "image/jpeg"] {
        if let Some(data) = bundle.get(mime) {
            return Some(ContentBlock::image(data.clone(), mime));
        }
    }
    [
        "image/svg+xml",
        "text/html",
        "text/markdown",
        "application/json",
        "text/plain",
    ]
    .iter()
    .find_map(|m| bundle.get(*m))
    .map(|text| ContentBlock::text(text.clone()))
}

/// The content of a cell run, and whether the cell raised: stdout, stderr (prefixed
/// `stderr:`), one block per result, then the traceback (prefixed `error:`).
pub fn execution(e: &Execution) -> (Vec<ContentBlock>, bool) {
    let mut out = Vec::new();
    if !e.stdout.is_empty() {
        out.push(ContentBlock::text(e.stdout.clone()));
    }
    if !e.stderr.is_empty() {
        out.push(ContentBlock::text(format!("stderr:\n{}", e.stderr)));
    }
    // A cell that only printed carries its stdout as a text/plain result too (the server's
    // rule for `.text`, seed 000 §2); do not say it twice.
    let only_stdout = e.results.len() == 1
        && e.results[0].len() == 1
        && e.results[0].get("text/plain").map(|t| t.trim_end()) == Some(e.stdout.trim_end());
    if !only_stdout {
        out.extend(e.results.iter().filter_map(result_block));
    }
    let failed = e.error.as_deref().is_some_and(|t| !t.is_empty());
    if let Some(tb) = e.error.as_deref().filter(|t| !t.is_empty()) {
        out.push(ContentBlock::text(format!("error:\n{tb}")));
    }
    if out.is_empty() {
        out.push(ContentBlock::text("(no output)"));
    }
    (out, failed)
}

/// The content of a file read from `path`.
pub fn file(path: &str, bytes: &[u8]) -> ContentBlock {
    let b64 = || base64::engine::general_purpose::STANDARD.encode(bytes);
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        return ContentBlock::image(b64(), "image/png");
    }
    if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
        return ContentBlock::image(b64(), "image/jpeg");
    }
    match std::str::from_utf8(bytes) {
        Ok(text) => ContentBlock::text(text.to_string()),
        Err(_) => ContentBlock::resource(ResourceContents::BlobResourceContents {
            uri: format!("sandbox://{path}"),
            mime_type: Some("application/octet-stream".into()),
            blob: b64(),
            meta: None,
        }),
    }
}

/// A value as pretty JSON text.
pub fn json<T: serde::Serialize>(value: &T) -> ContentBlock {
    ContentBlock::text(
        serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exec(
        results: Vec<BTreeMap<String, String>>,
        stdout: &str,
        error: Option<&str>,
    ) -> Execution {
        Execution {
            results,
            stdout: stdout.into(),
            stderr: String::new(),
            error: error.map(str::to_string),
            exit: 0,
            exit_code: 0,
            duration_ms: 1,
        }
    }

    fn bundle(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn images_are_image_content_and_tables_text() {
        let e = exec(
            vec![
                bundle(&[("image/png", "iVBOR"), ("text/plain", "<Figure>")]),
                bundle(&[("text/html", "<table></table>"), ("text/plain", "df")]),
            ],
            "",
            None,
        );
        let (blocks, failed) = execution(&e);
        assert!(!failed);
        assert_eq!(blocks.len(), 2);
        let img = blocks[0].as_image().expect("image");
        assert_eq!(
            (img.data.as_str(), img.mime_type.as_str()),
            ("iVBOR", "image/png")
        );
        assert_eq!(
            blocks[1].as_text().map(|t| t.text.as_str()),
            Some("<table></table>")
        );
    }

    #[test]
    fn printed_output_is_said_once_and_errors_flag_the_result() {
        let (blocks, _) = execution(&exec(vec![bundle(&[("text/plain", "6")])], "6\n", None));
        assert_eq!(blocks.len(), 1);
        let (blocks, failed) = execution(&exec(vec![], "", Some("ZeroDivisionError")));
        assert!(failed);
        assert!(blocks[0]
            .as_text()
            .is_some_and(|t| t.text.contains("ZeroDivisionError")));
        let (blocks, _) = execution(&exec(vec![], "", None));
        assert_eq!(
            blocks[0].as_text().map(|t| t.text.as_str()),
            Some("(no output)")
        );
    }

    #[test]
    fn files_by_content() {
        assert!(file("/a.png", b"\x89PNG\r\n\x1a\nrest")
            .as_image()
            .is_some());
        assert_eq!(
            file("/a.txt", "héllo".as_bytes())
                .as_text()
                .map(|t| t.text.as_str()),
            Some("héllo")
        );
        assert!(matches!(
            file("/a.bin", &[0, 159, 146, 150]),
            ContentBlock::Resource(_)
        ));
    }
}
