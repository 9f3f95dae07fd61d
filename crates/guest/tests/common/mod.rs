//! Test harness: runs the real guest binary as a child and speaks the frame protocol to it.
#![allow(dead_code)]

use pandastack_guest_protocol::{read_frame, write_frame, Frame, GuestMsg, HostMsg, RequestId};
use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// A reply: the message and its body.
pub type Reply = (GuestMsg, Vec<u8>);

/// Replies by request id, and the condvar signalled when one arrives.
type Inbox = Arc<(Mutex<HashMap<RequestId, Vec<Reply>>>, Condvar)>;

/// A running guest daemon.
pub struct Guest {
    child: Child,
    stdin: Mutex<ChildStdin>,
    replies: Inbox,
    next_id: AtomicU64,
}

impl Guest {
    /// The guest binary on this host.
    pub fn start() -> Guest {
        Self::from_command(Command::new(env!("CARGO_BIN_EXE_pandastack-guest")))
    }

    /// The guest binary copied to `<rootfs>/.pandastack/` (with kernel.py) and run under chroot.
    pub fn start_in(rootfs: &Path) -> Guest {
        install(rootfs);
        let chroot = ["/usr/sbin/chroot", "/usr/bin/chroot", "/sbin/chroot"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("chroot binary");
        let mut cmd = Command::new(chroot);
        cmd.arg(rootfs)
            .arg("/.pandastack/pandastack-guest")
            .env_clear();
        Self::from_command(cmd)
    }

    /// The guest binary copied with kernel.py into a fresh temp dir, run on this host (its
    /// python3 decides which kernel flavour runs).
    pub fn start_with_driver() -> Guest {
        let dir =
            std::env::temp_dir().join(format!("pg-driver-{}-{}", std::process::id(), next_dir()));
        std::fs::create_dir_all(&dir).unwrap();
        let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        std::fs::copy(
            env!("CARGO_BIN_EXE_pandastack-guest"),
            dir.join("pandastack-guest"),
        )
        .unwrap();
        std::fs::copy(crate_dir.join("kernel.py"), dir.join("kernel.py")).unwrap();
        Self::from_command(Command::new(dir.join("pandastack-guest")))
    }

    fn from_command(mut cmd: Command) -> Guest {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn guest");
        let stdin = child.stdin.take().unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let replies: Inbox = Arc::default();
        let r = Arc::clone(&replies);
        std::thread::spawn(move || {
            while let Ok(frame) = read_frame(&mut stdout) {
                let msg: GuestMsg = frame.decode().expect("guest sent a bad frame");
                let (map, cv) = &*r;
                map.lock()
                    .unwrap()
                    .entry(msg.id())
                    .or_default()
                    .push((msg, frame.body));
                cv.notify_all();
            }
        });
        let g = Guest {
            child,
            stdin: Mutex::new(stdin),
            replies,
            next_id: AtomicU64::new(1),
        };
        let id = g.id();
        let hello = g.call(HostMsg::Hello {
            id,
            version: pandastack_guest_protocol::PROTOCOL_VERSION,
        });
        assert!(
            matches!(hello.last().unwrap().0, GuestMsg::HelloOk { .. }),
            "{hello:?}"
        );
        g
    }

    /// A fresh request id.
    pub fn id(&self) -> RequestId {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Sends `msg` with `body`.
    pub fn send(&self, msg: &HostMsg, body: Vec<u8>) {
        let frame = Frame::new(msg, body).unwrap();
        write_frame(&mut *self.stdin.lock().unwrap(), &frame).unwrap();
    }

    /// Sends raw header bytes (to test bad frames).
    pub fn send_raw(&self, header: &[u8]) {
        let frame = Frame {
            header: header.to_vec(),
            body: Vec::new(),
        };
        write_frame(&mut *self.stdin.lock().unwrap(), &frame).unwrap();
    }

    /// Waits (up to `timeout`) for the final reply of `id` and returns all its replies.
    pub fn wait(&self, id: RequestId, timeout: Duration) -> Vec<Reply> {
        let (map, cv) = &*self.replies;
        let end = Instant::now() + timeout;
        let mut m = map.lock().unwrap();
        loop {
            if m.get(&id)
                .is_some_and(|v| v.last().is_some_and(|(msg, _)| msg.is_final()))
            {
                return m.remove(&id).unwrap();
            }
            let now = Instant::now();
            assert!(
                now < end,
                "no final reply for request {id} within {timeout:?}: {:?}",
                m.get(&id)
            );
            m = cv.wait_timeout(m, end - now).unwrap().0;
        }
    }

    /// How many replies of `id` have arrived and not been taken by [`Guest::wait`].
    pub fn received(&self, id: RequestId) -> usize {
        self.replies.0.lock().unwrap().get(&id).map_or(0, Vec::len)
    }

    /// Sends `msg` (no body) and waits up to 30 s for its replies.
    pub fn call(&self, msg: HostMsg) -> Vec<Reply> {
        let id = msg.id();
        self.send(&msg, Vec::new());
        self.wait(id, Duration::from_secs(30))
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn next_dir() -> u64 {
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// Whether this host's python3 can import IPython.
pub fn host_has_ipython() -> bool {
    Command::new("python3")
        .args(["-c", "import IPython"])
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// What an exec produced.
#[derive(Debug)]
pub struct ExecResult {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exit_code: i32,
    pub timed_out: bool,
    pub error: Option<GuestMsg>,
}

/// Splits exec replies into output and exit.
pub fn exec_result(replies: Vec<Reply>) -> ExecResult {
    let mut r = ExecResult {
        stdout: vec![],
        stderr: vec![],
        exit_code: -1,
        timed_out: false,
        error: None,
    };
    for (msg, body) in replies {
        match msg {
            GuestMsg::Output {
                stream: pandastack_guest_protocol::OutputStream::Stdout,
                ..
            } => r.stdout.extend(body),
            GuestMsg::Output { .. } => r.stderr.extend(body),
            GuestMsg::Exited {
                exit_code,
                timed_out,
                ..
            } => {
                r.exit_code = exit_code;
                r.timed_out = timed_out;
            }
            other => r.error = Some(other),
        }
    }
    r
}

/// Copies the guest binary and kernel.py into `<rootfs>/.pandastack/` (scratch directory).
fn install(rootfs: &Path) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let dir = rootfs.join(".pandastack");
        std::fs::create_dir_all(&dir).unwrap();
        let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        for (src, name) in [
            (
                Path::new(env!("CARGO_BIN_EXE_pandastack-guest")).to_path_buf(),
                "pandastack-guest",
            ),
            (crate_dir.join("kernel.py"), "kernel.py"),
        ] {
            let tmp = dir.join(format!(".{name}.tmp"));
            std::fs::copy(&src, &tmp).unwrap();
            std::fs::rename(&tmp, dir.join(name)).unwrap();
        }
    });
}

/// The baked code-interpreter rootfs (python3, IPython, pandas, matplotlib) named by
/// `PANDASTACK_CI_ROOTFS`. Without it (or without root) the kernel tests print why and return,
/// unless `PANDASTACK_REQUIRE_SANDBOX_TESTS=1` (scripts/test.sh sets it), where that is a failure.
pub fn ci_rootfs() -> Option<&'static Path> {
    static ROOTFS: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    let p = ROOTFS.get_or_init(|| std::env::var_os("PANDASTACK_CI_ROOTFS").map(Into::into));
    let why = match p {
        None => "PANDASTACK_CI_ROOTFS is not set".to_string(),
        Some(p) if !p.join("usr/bin/python3").exists() => format!("{} has no python3", p.display()),
        Some(_) if !is_root() => "chroot needs root".to_string(),
        Some(p) => return Some(p.as_path()),
    };
    if std::env::var("PANDASTACK_REQUIRE_SANDBOX_TESTS").as_deref() == Ok("1") {
        panic!("kernel tests cannot run: {why}");
    }
    eprintln!("SKIPPED: kernel tests: {why}");
    None
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// P50 of `samples`, µs.
pub fn p50_us(mut samples: Vec<Duration>) -> u128 {
    samples.sort();
    samples[samples.len() / 2].as_micros()
}
