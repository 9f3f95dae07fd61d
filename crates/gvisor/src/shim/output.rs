//! The shim's log, bounded: what a sandbox can make the host write through it is capped
//! (issue 23 finding 3).
//!
//! # Mechanism
//! The shim's own stdout and stderr become the write end of a pipe, so runsc, its gofer and
//! sandbox processes and the container's PID 1 (whose stderr is runsc's) all write into it,
//! and a drain thread reads it into the log file (`shim.log`, `checkpoint.log`). The thread
//! never stops reading: what passes the rate limit ([`BURST_BYTES`], then
//! [`RATE_BYTES_PER_SEC`]) is written, the rest is read and counted, and a note
//! `shim: dropped N bytes of output` says so (at most once a second, and at [`flush`]).
//! A writer inside the sandbox is never blocked by the limit, and the guest channel (a socket
//! of its own) is never touched by it.
//!
//! The file is rotated before it would pass [`ROTATE_BYTES`]: it becomes `<log>.1` (an older
//! `.1` goes), so one log takes at most twice that on the host's disk, whatever is written.
//! Notes count towards the same files, so the bound holds for them too.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Bytes that may be written at once after a quiet spell (the token bucket's size).
pub const BURST_BYTES: u64 = 1024 * 1024;
/// Bytes per second written once the burst is spent (the bucket's refill rate).
pub const RATE_BYTES_PER_SEC: u64 = 64 * 1024;
/// Size at which the log is rotated to `<log>.1`, bytes: one log takes at most twice this.
pub const ROTATE_BYTES: u64 = 4 * 1024 * 1024;
/// Least time between two `dropped N bytes` notes.
const NOTE_EVERY: Duration = Duration::from_secs(1);
/// Bytes read from the pipe at a time.
const READ_CHUNK: usize = 64 * 1024;

/// A log file with a rate limit and rotation (the rules in the module docs).
pub struct BoundedLog {
    path: PathBuf,
    file: Option<File>,
    /// Bytes in the current file.
    size: u64,
    /// Bytes that may be written now (fractional: refilled by elapsed time).
    tokens: f64,
    refilled: Instant,
    /// Bytes dropped since the last note.
    dropped: u64,
    noted: Option<Instant>,
    /// Whether the last byte written ended a line (a note starts on a line of its own).
    line_start: bool,
}

impl BoundedLog {
    /// Opens `path` for appending, with a full bucket at `now`.
    ///
    /// # Errors
    /// I/O errors opening the file.
    pub fn open(path: &Path, now: Instant) -> io::Result<Self> {
        let file = Self::append_to(path)?;
        let size = file.metadata()?.len();
        Ok(BoundedLog {
            path: path.to_path_buf(),
            file: Some(file),
            size,
            tokens: BURST_BYTES as f64,
            refilled: now,
            dropped: 0,
            noted: None,
            line_start: true,
        })
    }

    fn append_to(path: &Path) -> io::Result<File> {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
    }

    /// The rotated file of `path`: `<path>.1`.
    pub fn rotated(path: &Path) -> PathBuf {
        let mut name = path.as_os_str().to_owned();
        name.push(".1");
        PathBuf::from(name)
    }

    /// Writes as much of `chunk` as the rate limit allows at `now` and counts the rest as
    /// dropped; notes what was dropped when a note is due.
    pub fn write(&mut self, chunk: &[u8], now: Instant) {
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.refilled = self.refilled.max(now);
        self.tokens = (self.tokens + elapsed * RATE_BYTES_PER_SEC as f64).min(BURST_BYTES as f64);
        let admitted = (self.tokens as usize).min(chunk.len());
        self.tokens -= admitted as f64;
        self.dropped += (chunk.len() - admitted) as u64;
        self.append(&chunk[..admitted]);
        self.note_dropped(now, false);
    }

    /// Bytes dropped and not noted yet.
    pub fn pending_drops(&self) -> u64 {
        self.dropped
    }

    /// Writes the `dropped N bytes` note if bytes were dropped and a note is due (or `force`).
    pub fn note_dropped(&mut self, now: Instant, force: bool) {
        let due = self
            .noted
            .is_none_or(|at| now.saturating_duration_since(at) >= NOTE_EVERY);
        if self.dropped == 0 || !(due || force) {
            return;
        }
        let note = format!(
            "{}shim: dropped {} bytes of output (limit {} KiB at once, then {} KiB/s)\n",
            if self.line_start { "" } else { "\n" },
            self.dropped,
            BURST_BYTES / 1024,
            RATE_BYTES_PER_SEC / 1024
        );
        self.dropped = 0;
        self.noted = Some(now);
        self.append(note.as_bytes());
    }

    /// Appends `bytes`, rotating first when they would take the file past [`ROTATE_BYTES`].
    /// A failed write is dropped: the log must never hold up its writers.
    fn append(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        if self.size + bytes.len() as u64 > ROTATE_BYTES {
            self.rotate();
        }
        let Some(file) = self.file.as_mut() else {
            return;
        };
        if file.write_all(bytes).is_ok() {
            self.size += bytes.len() as u64;
            self.line_start = bytes.ends_with(b"\n");
        }
    }

    /// Moves the file to `<log>.1` and starts an empty one. When the new file cannot be
    /// made, the log stops (writes are dropped) rather than grow the old one.
    fn rotate(&mut self) {
        self.file = None;
        let _ = std::fs::rename(&self.path, Self::rotated(&self.path));
        self.file = Self::append_to(&self.path).ok();
        self.size = 0;
    }
}

/// The drain of this process's output pipe, once [`start`] made one.
static OUTPUT: OnceLock<Output> = OnceLock::new();

/// The drain of the shim's output pipe into a [`BoundedLog`].
struct Output {
    log: Arc<Mutex<BoundedLog>>,
    reader: Arc<io::PipeReader>,
}

/// What one drain pass found.
#[derive(Debug, PartialEq, Eq)]
enum Drained {
    /// The pipe is empty for now.
    Empty,
    /// Every write end is closed.
    Closed,
}

/// Opens the log at `path`, makes this process's stdout and stderr the write end of a new pipe
/// (inherited by the children the shim starts from then on) and starts the drain thread. Once
/// per process: a second call fails.
///
/// # Errors
/// I/O errors opening the log, making the pipe or moving it onto fds 1 and 2.
pub fn start(path: &Path) -> io::Result<()> {
    let log = Arc::new(Mutex::new(BoundedLog::open(path, Instant::now())?));
    let (reader, writer) = io::pipe()?;
    set_nonblocking(&reader)?;
    let out = Output {
        log,
        reader: Arc::new(reader),
    };
    let (log, reader) = (out.log.clone(), out.reader.clone());
    OUTPUT
        .set(out)
        .map_err(|_| io::Error::other("the shim's output is set up already"))?;
    let writer = OwnedFd::from(writer);
    for target in [libc::STDOUT_FILENO, libc::STDERR_FILENO] {
        // SAFETY: dup2 onto the standard fds, which this process owns; `writer` is open.
        if unsafe { libc::dup2(writer.as_raw_fd(), target) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    drop(writer);
    std::thread::spawn(move || drain(&reader, &log));
    Ok(())
}

/// Writes what waits in the pipe and the last `dropped` note, so the lines written so far
/// (runsc's last words, the shim's own) are in the file before the shim reports an exit code.
/// Does nothing without [`start`].
pub fn flush() {
    let Some(out) = OUTPUT.get() else { return };
    let mut log = super::lock(&out.log);
    let _ = drain_ready(&out.reader, &mut log);
    log.note_dropped(Instant::now(), true);
}

fn set_nonblocking(fd: &impl AsRawFd) -> io::Result<()> {
    // SAFETY: fcntl on an fd the caller owns, with integer arguments only.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0
        || unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0
    {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The drain thread: sleeps in poll(2) until the pipe has data (or, with drops not yet noted,
/// for a second, so a note follows the end of a flood), then drains it.
fn drain(reader: &io::PipeReader, log: &Mutex<BoundedLog>) {
    loop {
        let timeout = if super::lock(log).pending_drops() > 0 {
            NOTE_EVERY.as_millis() as libc::c_int
        } else {
            -1
        };
        let mut fd = libc::pollfd {
            fd: reader.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd whose fd `reader` owns for the duration of the call.
        let n = unsafe { libc::poll(&mut fd, 1, timeout) };
        if n < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            // Never give up: writers would block on a full pipe. Drain without poll's help.
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut log = super::lock(log);
        if drain_ready(reader, &mut log) == Drained::Closed {
            log.note_dropped(Instant::now(), true);
            return;
        }
        log.note_dropped(Instant::now(), false);
    }
}

/// Reads what the pipe holds into `log` until it is empty (or after 16 chunks, so the lock is
/// released now and then under a flood).
fn drain_ready(mut reader: &io::PipeReader, log: &mut BoundedLog) -> Drained {
    let mut buf = vec![0u8; READ_CHUNK];
    for _ in 0..16 {
        match reader.read(&mut buf) {
            Ok(0) => return Drained::Closed,
            Ok(n) => log.write(&buf[..n], Instant::now()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Drained::Empty,
        }
    }
    Drained::Empty
}

/// Longest line [`last_line`] returns, bytes (it ends up in API errors).
const MAX_LINE_BYTES: usize = 300;

/// The last non-empty line of a shim log that says something, for error messages: the shim's
/// own exit and `dropped` notes are skipped, host paths are cut to their file name so that
/// they do not reach API clients, and the line is clipped to [`MAX_LINE_BYTES`].
pub fn last_line(path: &Path) -> String {
    let text = String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned();
    let line = text
        .lines()
        .rev()
        .find(|l| {
            !l.trim().is_empty()
                && !l.starts_with("shim: runsc exited")
                && !l.starts_with("shim: dropped")
        })
        .unwrap_or("runsc exited early");
    let mut line = line
        .split_whitespace()
        .map(|w| {
            if w.starts_with('/') {
                w.rsplit('/').next().unwrap_or(w)
            } else {
                w
            }
        })
        .collect::<Vec<_>>()
        .join(" ");
    if line.len() > MAX_LINE_BYTES {
        let cut = (0..=MAX_LINE_BYTES)
            .rev()
            .find(|&i| line.is_char_boundary(i))
            .unwrap_or(0);
        line.truncate(cut);
        line.push_str("...");
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_log() -> (PathBuf, PathBuf) {
        let dir = std::env::temp_dir().join(format!("shim-log-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("shim.log");
        (dir, path)
    }

    fn size(p: &Path) -> u64 {
        std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
    }

    #[test]
    fn a_flood_writes_the_burst_then_the_rate_and_notes_the_rest() {
        let (dir, path) = temp_log();
        let t0 = Instant::now();
        let mut log = BoundedLog::open(&path, t0).unwrap();
        let chunk = vec![b'X'; 64 * 1024];
        // 20 MiB at once: only the burst passes.
        for _ in 0..320 {
            log.write(&chunk, t0);
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let xs = text.bytes().filter(|&b| b == b'X').count() as u64;
        assert_eq!(xs, BURST_BYTES);
        assert!(
            text.contains(&format!("dropped {} bytes", 64 * 1024)),
            "the first drop is noted at once"
        );
        assert_eq!(
            log.pending_drops(),
            20 * 1024 * 1024 - BURST_BYTES - 64 * 1024
        );
        // Two seconds later: two seconds' worth passes, and the rest is noted.
        log.write(&chunk, t0 + Duration::from_secs(2));
        log.write(&chunk, t0 + Duration::from_secs(2));
        let text = std::fs::read_to_string(&path).unwrap();
        let xs = text.bytes().filter(|&b| b == b'X').count() as u64;
        assert_eq!(xs, BURST_BYTES + 2 * RATE_BYTES_PER_SEC);
        assert!(text.contains(&format!(
            "dropped {} bytes",
            20 * 1024 * 1024 - BURST_BYTES - 64 * 1024
        )));
        log.note_dropped(t0 + Duration::from_secs(2), true);
        assert_eq!(log.pending_drops(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_log_rotates_to_one_older_file_and_never_passes_twice_the_limit() {
        let (dir, path) = temp_log();
        let t0 = Instant::now();
        let mut log = BoundedLog::open(&path, t0).unwrap();
        let line = [b"a line of output that goes on".repeat(100), b"\n".to_vec()].concat();
        // An hour of a line a second (~10 MiB), within the rate: the log rotates twice.
        for s in 0..3600u64 {
            log.write(&line, t0 + Duration::from_secs(s));
            assert!(size(&path) <= ROTATE_BYTES);
        }
        let rotated = BoundedLog::rotated(&path);
        assert!(size(&rotated) > 0 && size(&rotated) <= ROTATE_BYTES);
        assert!(size(&path) + size(&rotated) <= 2 * ROTATE_BYTES);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2, "one .1 only");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_existing_log_counts_towards_its_rotation() {
        let (dir, path) = temp_log();
        std::fs::write(&path, vec![b'o'; ROTATE_BYTES as usize - 10]).unwrap();
        let mut log = BoundedLog::open(&path, Instant::now()).unwrap();
        log.write(b"twenty bytes of new\n", Instant::now());
        assert_eq!(size(&BoundedLog::rotated(&path)), ROTATE_BYTES - 10);
        assert_eq!(std::fs::read(&path).unwrap(), b"twenty bytes of new\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_last_line_skips_notes_hides_paths_and_is_clipped() {
        let (dir, path) = temp_log();
        std::fs::write(&path, "E cannot open /var/lib/x/bundle/config.json\nshim: dropped 3 bytes of output\nshim: runsc exited with 1\n").unwrap();
        assert_eq!(last_line(&path), "E cannot open config.json");
        std::fs::write(
            &path,
            [b"W ".to_vec(), vec![b'X'; 5000], b"\n".to_vec()].concat(),
        )
        .unwrap();
        assert_eq!(last_line(&path).len(), MAX_LINE_BYTES + 3);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Through a real pipe: a writer that floods it is never blocked for long (the drain keeps
    /// reading), and the file stays within the burst plus a note.
    #[test]
    fn the_drain_keeps_reading_a_flood_and_keeps_the_file_bounded() {
        let (dir, path) = temp_log();
        let log = Arc::new(Mutex::new(BoundedLog::open(&path, Instant::now()).unwrap()));
        let (reader, mut writer) = io::pipe().unwrap();
        set_nonblocking(&reader).unwrap();
        let reader = Arc::new(reader);
        let (l, r) = (log.clone(), reader.clone());
        let drainer = std::thread::spawn(move || drain(&r, &l));
        let chunk = vec![b'X'; 64 * 1024];
        for _ in 0..320 {
            writer.write_all(&chunk).unwrap();
        }
        drop(writer);
        drainer.join().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(size(&path) <= BURST_BYTES + 256 * 1024, "{}", size(&path));
        assert!(text.contains("bytes of output"), "the drop is noted");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
