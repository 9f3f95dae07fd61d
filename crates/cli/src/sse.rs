//! A line-based Server-Sent Events reader (the subset PandaStack speaks, contract §3): lines
//! `event: NAME`, `data: TEXT` (several are joined with `\n`), comments starting with `:` (the
//! server's keep-alive pings) and a blank line that ends an event. LF and CRLF both work. An
//! event name applies to one event only; an event without one is named `message`. A final event
//! that the server did not close with a blank line is still delivered at end of stream.

use std::io::{self, BufRead};

/// One server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The `event:` name, or `message`.
    pub name: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// Reads events from a byte stream as they arrive.
pub struct SseReader<R> {
    input: R,
    line: Vec<u8>,
}

impl<R: BufRead> SseReader<R> {
    /// A reader over `input` (e.g. a `BufReader` over an HTTP response body).
    pub fn new(input: R) -> Self {
        SseReader {
            input,
            line: Vec::new(),
        }
    }

    /// The next event, or `None` at end of stream.
    ///
    /// Errors: the underlying read failed (connection reset, timeout).
    pub fn next_event(&mut self) -> io::Result<Option<Event>> {
        let mut name: Option<String> = None;
        let mut data: Option<String> = None;
        loop {
            self.line.clear();
            let n = self.input.read_until(b'\n', &mut self.line)?;
            if n == 0 {
                // End of stream: deliver an unterminated event rather than drop it.
                return Ok(data.map(|data| Event {
                    name: name.unwrap_or_else(|| "message".into()),
                    data,
                }));
            }
            let text = String::from_utf8_lossy(&self.line);
            let text = text.trim_end_matches(['\n', '\r']);
            if text.is_empty() {
                if let Some(data) = data.take() {
                    return Ok(Some(Event {
                        name: name.take().unwrap_or_else(|| "message".into()),
                        data,
                    }));
                }
                name = None;
                continue;
            }
            if text.starts_with(':') {
                continue;
            }
            let (field, value) = match text.split_once(':') {
                Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
                None => (text, ""),
            };
            match field {
                "event" => name = Some(value.to_string()),
                "data" => match data.as_mut() {
                    Some(d) => {
                        d.push('\n');
                        d.push_str(value);
                    }
                    None => data = Some(value.to_string()),
                },
                _ => {} // `id:`, `retry:` and unknown fields carry nothing the CLI uses.
            }
        }
    }
}

impl<R: BufRead> Iterator for SseReader<R> {
    type Item = io::Result<Event>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_event().transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(raw: &str) -> Vec<Event> {
        SseReader::new(raw.as_bytes())
            .collect::<io::Result<Vec<_>>>()
            .unwrap_or_default()
    }

    fn ev(name: &str, data: &str) -> Event {
        Event {
            name: name.into(),
            data: data.into(),
        }
    }

    #[test]
    fn exec_stream_events() {
        let raw = "event: stdout\ndata: {\"chunk\":\"4\\n\"}\n\n: ping\n\nevent: exit\ndata: {\"exit_code\":0}\n\n";
        assert_eq!(
            events(raw),
            vec![
                ev("stdout", r#"{"chunk":"4\n"}"#),
                ev("exit", r#"{"exit_code":0}"#)
            ]
        );
    }

    #[test]
    fn crlf_multiline_and_unnamed() {
        let raw = "data: a\r\ndata: b\r\n\r\nevent:x\r\ndata:c\r\n\r\n";
        assert_eq!(events(raw), vec![ev("message", "a\nb"), ev("x", "c")]);
    }

    #[test]
    fn name_does_not_leak_into_the_next_event() {
        let raw = "event: stderr\ndata: 1\n\ndata: 2\n\n";
        assert_eq!(events(raw), vec![ev("stderr", "1"), ev("message", "2")]);
    }

    #[test]
    fn unterminated_last_event_is_delivered() {
        assert_eq!(
            events("event: exit\ndata: {\"exit_code\":3}"),
            vec![ev("exit", r#"{"exit_code":3}"#)]
        );
        assert_eq!(events("event: exit\n"), vec![]);
    }

    #[test]
    fn comments_and_ids_are_ignored() {
        let raw = ": hello\nid: 7\nretry: 100\nevent: stdout\ndata: x\n\n";
        assert_eq!(events(raw), vec![ev("stdout", "x")]);
    }
}
