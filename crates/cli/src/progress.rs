//! A transfer progress bar on stderr for `fs upload` / `fs download`, drawn only when stderr is
//! a terminal (so scripts and logs never see carriage returns). It redraws at most every
//! 100 ms: `name [#######-------]  45%  12.0 MiB / 27.0 MiB  5.1 MiB/s`. Without a known
//! total it shows the byte count and rate only. [`Spinner`]: the same for a wait of unknown
//! length (`db create`): `⠹ provisioning database ...  1.2 s`.

use crate::output::bytes;
use std::io::{self, IsTerminal, Read, Write};
use std::time::{Duration, Instant};

/// Time between redraws.
const REDRAW: Duration = Duration::from_millis(100);
/// Width of the bar, characters.
const BAR_WIDTH: usize = 24;

/// Progress of one transfer.
pub struct Progress {
    label: String,
    total: Option<u64>,
    done: u64,
    started: Instant,
    last_draw: Option<Instant>,
    enabled: bool,
}

impl Progress {
    /// A bar for `total` bytes (if known); drawn only when stderr is a terminal.
    pub fn new(label: &str, total: Option<u64>) -> Progress {
        Progress {
            label: label.into(),
            total,
            done: 0,
            started: Instant::now(),
            last_draw: None,
            enabled: io::stderr().is_terminal(),
        }
    }

    /// Counts `n` more bytes and redraws if due.
    pub fn advance(&mut self, n: u64) {
        self.done += n;
        if !self.enabled {
            return;
        }
        let now = Instant::now();
        if self
            .last_draw
            .is_none_or(|t| now.duration_since(t) >= REDRAW)
        {
            self.last_draw = Some(now);
            self.draw();
        }
    }

    /// Bytes counted so far.
    pub fn done(&self) -> u64 {
        self.done
    }

    /// Draws the final state and ends the line.
    pub fn finish(&mut self) {
        if self.enabled {
            self.draw();
            let _ = writeln!(io::stderr());
            self.enabled = false;
        }
    }

    fn draw(&self) {
        let _ = write!(
            io::stderr(),
            "\r{}\x1b[K",
            render(&self.label, self.done, self.total, self.started.elapsed())
        );
        let _ = io::stderr().flush();
    }
}

/// One line of the bar (without the leading `\r`).
pub fn render(label: &str, done: u64, total: Option<u64>, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64();
    let rate = if secs > 0.0 {
        format!("{}/s", bytes((done as f64 / secs) as u64))
    } else {
        "-".into()
    };
    match total {
        Some(total) if total > 0 => {
            let frac = (done as f64 / total as f64).clamp(0.0, 1.0);
            let filled = (frac * BAR_WIDTH as f64).round() as usize;
            let bar = format!("{}{}", "#".repeat(filled), "-".repeat(BAR_WIDTH - filled));
            format!(
                "{label} [{bar}] {:>3.0}%  {} / {}  {rate}",
                frac * 100.0,
                bytes(done),
                bytes(total)
            )
        }
        _ => format!("{label}  {}  {rate}", bytes(done)),
    }
}

/// Frames of the spinner.
const SPIN: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

/// A spinner line on stderr while something is awaited, drawn by its own thread every 100 ms
/// (the CLI's calls block the main thread); nothing when stderr is not a terminal.
pub struct Spinner {
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Spinner {
    /// Starts spinning with `label`.
    pub fn start(label: &str) -> Spinner {
        if !io::stderr().is_terminal() {
            return Spinner {
                stop: None,
                thread: None,
            };
        }
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let label = label.to_string();
        let started = Instant::now();
        let thread = std::thread::spawn(move || {
            for i in 0.. {
                let _ = write!(
                    io::stderr(),
                    "\r{}\x1b[K",
                    spin_line(&label, i, started.elapsed())
                );
                let _ = io::stderr().flush();
                if rx.recv_timeout(REDRAW).is_ok() {
                    break;
                }
            }
            let _ = write!(io::stderr(), "\r\x1b[K");
            let _ = io::stderr().flush();
        });
        Spinner {
            stop: Some(tx),
            thread: Some(thread),
        }
    }

    /// Stops and clears the line.
    pub fn stop(mut self) {
        self.end();
    }

    fn end(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.end();
    }
}

/// One spinner line (without the leading `\r`): frame `i`, the label, the time so far.
pub fn spin_line(label: &str, i: usize, elapsed: Duration) -> String {
    format!(
        "{} {label}  {:.1} s",
        SPIN[i % SPIN.len()],
        elapsed.as_secs_f64()
    )
}

/// A reader that counts what passes through it (upload bodies).
pub struct ProgressReader<R> {
    inner: R,
    progress: Progress,
}

impl<R: Read> ProgressReader<R> {
    /// Wraps `inner`.
    pub fn new(inner: R, progress: Progress) -> Self {
        ProgressReader { inner, progress }
    }
}

impl<R: Read> Read for ProgressReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 {
            self.progress.finish();
        } else {
            self.progress.advance(n as u64);
        }
        Ok(n)
    }
}

/// A writer that counts what passes through it (download files).
pub struct ProgressWriter<W> {
    inner: W,
    /// The progress, finished by the caller.
    pub progress: Progress,
}

impl<W: Write> ProgressWriter<W> {
    /// Wraps `inner`.
    pub fn new(inner: W, progress: Progress) -> Self {
        ProgressWriter { inner, progress }
    }

    /// The wrapped writer.
    pub fn into_inner(self) -> W {
        self.inner
    }
}

impl<W: Write> Write for ProgressWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.progress.advance(n as u64);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_with_and_without_total() {
        let s = render("data.csv", 512, Some(1024), Duration::from_secs(1));
        assert!(
            s.starts_with("data.csv [############------------]  50%  512 B / 1.0 KiB  512 B/s"),
            "{s}"
        );
        let s = render("x", 2048, None, Duration::from_secs(2));
        assert_eq!(s, "x  2.0 KiB  1.0 KiB/s");
    }

    #[test]
    fn spinner_lines_turn_and_count() {
        assert_eq!(
            spin_line("waiting", 0, Duration::from_millis(1200)),
            "⠋ waiting  1.2 s"
        );
        assert_eq!(spin_line("waiting", 11, Duration::ZERO), "⠙ waiting  0.0 s");
    }
}
