//! A Server-Sent Events reader over a response body (the subset PandaStack speaks, contract §3):
//! `event: NAME`, `data: TEXT` (several are joined with `\n`), `id: N`, comments starting with
//! `:` (keep-alive pings) and a blank line ending an event. LF and CRLF both work. A name applies
//! to one event only (an unnamed event is `message`); a last event the server did not close with
//! a blank line is still delivered at end of stream.

use crate::error::{Error, Result};
use crate::http::connection_error;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;

/// One server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` name, or `message`.
    pub name: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
    /// The `id:` field, if any.
    pub id: Option<String>,
}

/// Reads events from a byte stream as they arrive.
pub(crate) struct SseReader {
    body: BoxStream<'static, std::result::Result<Bytes, reqwest::Error>>,
    buf: Vec<u8>,
    done: bool,
    name: Option<String>,
    data: Option<String>,
    id: Option<String>,
}

impl SseReader {
    /// A reader over a response's body.
    pub fn new(resp: reqwest::Response) -> SseReader {
        SseReader::from_stream(resp.bytes_stream().boxed())
    }

    pub(crate) fn from_stream(
        body: BoxStream<'static, std::result::Result<Bytes, reqwest::Error>>,
    ) -> SseReader {
        SseReader {
            body,
            buf: Vec::new(),
            done: false,
            name: None,
            data: None,
            id: None,
        }
    }

    /// The next event, or `None` at end of stream.
    ///
    /// # Errors
    /// [`Error::Connection`] when the body breaks off.
    pub async fn next(&mut self) -> Result<Option<SseEvent>> {
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                if let Some(ev) = self.line(&line) {
                    return Ok(Some(ev));
                }
                continue;
            }
            if self.done {
                if !self.buf.is_empty() {
                    let line = std::mem::take(&mut self.buf);
                    if let Some(ev) = self.line(&line) {
                        return Ok(Some(ev));
                    }
                }
                return Ok(self.take_event());
            }
            match self.body.next().await {
                Some(Ok(chunk)) => self.buf.extend_from_slice(&chunk),
                Some(Err(e)) => return Err(connection_error(&e)),
                None => self.done = true,
            }
        }
    }

    /// Handles one line; returns the event it completes, if any.
    fn line(&mut self, raw: &[u8]) -> Option<SseEvent> {
        let text = String::from_utf8_lossy(raw);
        let text = text.trim_end_matches(['\n', '\r']);
        if text.is_empty() {
            let ev = self.take_event();
            self.name = None;
            self.id = None;
            return ev;
        }
        if text.starts_with(':') {
            return None;
        }
        let (field, value) = match text.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (text, ""),
        };
        match field {
            "event" => self.name = Some(value.to_string()),
            "id" => self.id = Some(value.to_string()),
            "data" => match self.data.as_mut() {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => self.data = Some(value.to_string()),
            },
            _ => {} // `retry:` and unknown fields carry nothing used here.
        }
        None
    }

    fn take_event(&mut self) -> Option<SseEvent> {
        let data = self.data.take()?;
        Some(SseEvent {
            name: self.name.take().unwrap_or_else(|| "message".into()),
            data,
            id: self.id.take(),
        })
    }
}

/// Decodes an event's JSON data.
///
/// # Errors
/// [`Error::Decode`] naming the stream.
pub(crate) fn decode<T: serde::de::DeserializeOwned>(ev: &SseEvent, what: &str) -> Result<T> {
    serde_json::from_str(&ev.data).map_err(|e| Error::Decode {
        what: format!("{what} event '{}'", ev.name),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn events(chunks: &[&'static str]) -> Vec<SseEvent> {
        let parts: Vec<std::result::Result<Bytes, reqwest::Error>> = chunks
            .iter()
            .map(|c| Ok(Bytes::from_static(c.as_bytes())))
            .collect();
        let mut r = SseReader::from_stream(futures::stream::iter(parts).boxed());
        let mut out = Vec::new();
        while let Some(ev) = r.next().await.unwrap() {
            out.push(ev);
        }
        out
    }

    fn ev(name: &str, data: &str) -> SseEvent {
        SseEvent {
            name: name.into(),
            data: data.into(),
            id: None,
        }
    }

    #[tokio::test]
    async fn exec_stream_split_across_chunks() {
        let got = events(&[
            "event: stdout\ndata: {\"chu",
            "nk\":\"4\\n\"}\n\n: ping\n\nevent: exit\r\n",
            "data: {\"exit_code\":0}\r\n\r\n",
        ])
        .await;
        assert_eq!(
            got,
            vec![
                ev("stdout", r#"{"chunk":"4\n"}"#),
                ev("exit", r#"{"exit_code":0}"#)
            ]
        );
    }

    #[tokio::test]
    async fn ids_multiline_unnamed_and_unterminated() {
        let got = events(&[
            "id: 7\nevent: transition\ndata: a\ndata: b\n\ndata: c\n\nevent: exit\ndata: 3",
        ])
        .await;
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].id.as_deref(), Some("7"));
        assert_eq!(
            (got[0].name.as_str(), got[0].data.as_str()),
            ("transition", "a\nb")
        );
        assert_eq!(got[1], ev("message", "c"));
        assert_eq!(got[2], ev("exit", "3"));
        assert!(events(&["event: exit\n"]).await.is_empty());
    }
}
