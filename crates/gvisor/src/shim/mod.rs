//! The per-instance shim: `pandastack shim --socket S --exit-file E -- runsc ... run ...`.
//!
//! It creates a socket pair, starts runsc with one end as the container's stdin and stdout (the
//! guest daemon's channel), and serves the other end on the unix socket `S`. One host client is
//! served at a time; a new connection replaces the old one (that is how a restarted server takes
//! over). The shim forwards whole frames only (it reads the 8-byte prefix), so a client that
//! dies mid-frame never leaves a torn frame in the guest's stream. Frames the guest sends while
//! no client is connected are dropped: they answer requests of a client that is gone.
//!
//! The shim exits when runsc exits, after writing runsc's exit code to `E` and removing `S`.
//!
//! Without `--socket` it only runs the command (stdio as given, stdin from /dev/null) and
//! records its exit code in `E`: that is how a `runsc checkpoint` leaves proof that it finished
//! even when the server that started it was killed meanwhile.
//!
//! With `--control C --ready-file R` the shim runs in two stages, for containers made ahead of
//! time (issue 11): the command is `runsc create`, which gives the container its stdio (the
//! socket pair) and exits; the shim then writes `R`, serves the unix socket `C`, and waits for
//! one JSON line `{"argv": [...]}` naming the command that runs the container (`runsc restore`
//! attached); it answers `ok` once that is started and waits for it as in the one-stage mode.
//! A container destroyed before its second stage ends the shim too (its stdio closes).
//!
//! With `--log L` everything the shim's processes print (runsc, its sandbox and gofer, the
//! container's PID 1 on its stderr, the shim itself) goes through a pipe the shim drains into
//! `L` under a rate limit and rotation ([`output`]), so a sandbox cannot fill the host's disk
//! through it (issue 23 finding 3).

use pandastack_guest_protocol::{read_frame, write_frame, FrameError};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

mod mounts;
pub mod output;

use mounts::{hide_proc_sys_net, ForeignDisks};

/// Command-line arguments of the shim.
#[derive(Debug, Clone)]
pub struct ShimArgs {
    /// Host unix socket to serve the guest channel on; None to only run the command.
    pub socket: Option<PathBuf>,
    /// File that receives runsc's exit code when it exits.
    pub exit_file: PathBuf,
    /// The runsc command line (program first).
    pub command: Vec<String>,
    /// Start runsc in a mount namespace of its own with an empty tmpfs over `/proc/sys/net`.
    /// This runsc (0.0~20240729) refuses `--network=sandbox` when
    /// `/proc/sys/net/core/rmem_default` exists, which it does in every namespace of this
    /// kernel (fixed upstream in 20240807); hiding it is the workaround (notes, pitfall 1).
    pub hide_proc_sys_net: bool,
    /// Two-stage mode: the control socket on which the second command arrives.
    pub control: Option<PathBuf>,
    /// Two-stage mode: written once the first command succeeded and `control` listens.
    pub ready_file: Option<PathBuf>,
    /// The instance's volume staging directory (`<mounts>/sandbox/<id>`, volumes.rs): with
    /// `hide_proc_sys_net`, the copies of other instances' stagings and of the volumes' host
    /// mounts (`<mounts>/volume/*`) are dropped from the namespace; this one is kept.
    pub volume_staging: Option<PathBuf>,
    /// The log that runsc's, the container's and the shim's own output go to, bounded
    /// ([`output`]: rate limit and rotation, issue 23 finding 3). None: the stdout and
    /// stderr the shim was given, as they are.
    pub log: Option<PathBuf>,
}

/// The second-stage request on the control socket.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct ControlRequest {
    /// Program and arguments.
    pub argv: Vec<String>,
}

type Client = Arc<Mutex<Option<UnixStream>>>;

/// A process's exit code as a shell reports it: its own code, or 128 + the signal that
/// killed it (137 for a SIGKILL, e.g. from a memory cgroup's OOM killer).
fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// Runs the shim until runsc exits. Returns the process exit code to use (runsc's).
///
/// # Errors
/// I/O errors opening the log, setting up the socket pair, the listener or spawning runsc.
pub fn run(args: &ShimArgs) -> io::Result<i32> {
    if let Some(log) = &args.log {
        output::start(log)?;
    }
    let result = serve(args);
    if let Err(e) = &result {
        eprintln!("shim: {e}");
    }
    output::flush();
    result
}

fn serve(args: &ShimArgs) -> io::Result<i32> {
    let program = args
        .command
        .first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "shim needs a command"))?;
    let Some(socket) = &args.socket else {
        let status = Command::new(program)
            .args(&args.command[1..])
            .stdin(Stdio::null())
            .status()?;
        let code = exit_code(status);
        write_exit(&args.exit_file, code)?;
        return Ok(code);
    };
    let (host_end, guest_end) = UnixStream::pair()?;
    let guest_out = guest_end.try_clone()?;
    let mut cmd = runsc_command(program, &args.command[1..], args);
    cmd.stdin(Stdio::from(OwnedFd::from(guest_end)))
        .stdout(Stdio::from(OwnedFd::from(guest_out)));
    let mut child = cmd.spawn()?;
    // The command holds the parent's copies of the container's stdio: drop them, or the
    // guest stream never ends when the container goes (a target destroyed before its second
    // stage would leave this shim waiting forever).
    drop(cmd);

    let _ = std::fs::remove_file(socket);
    let listener = UnixListener::bind(socket)?;
    let client: Client = Arc::new(Mutex::new(None));
    let to_guest = Arc::new(Mutex::new(host_end.try_clone()?));
    // Its other end is dropped when the guest stream ends: a second stage waiting in poll(2)
    // wakes at once (EOF), with no periodic wake-ups while it waits.
    let (guest_closed, closed) = UnixStream::pair()?;

    let c = client.clone();
    std::thread::spawn(move || {
        pump_guest_to_client(host_end, c);
        drop(closed);
    });
    let c = client.clone();
    std::thread::spawn(move || accept_loop(listener, c, to_guest));

    let status = child.wait()?;
    let code = match (&args.control, status.success()) {
        (Some(control), true) => {
            eprintln!("shim: {status} from the first stage; waiting for the second");
            second_stage(args, control, &guest_closed)?
        }
        _ => {
            eprintln!("shim: runsc exited with {status}");
            exit_code(status)
        }
    };
    let _ = write_exit(&args.exit_file, code);
    let _ = std::fs::remove_file(socket);
    if let Some(c) = &args.control {
        let _ = std::fs::remove_file(c);
    }
    Ok(code)
}

/// A runsc command with stderr to the shim's log, in the `/proc/sys/net` workaround when asked
/// (`exit_file` lies in the instance's directory: it names the instance's own disk).
fn runsc_command(program: &str, args: &[String], shim: &ShimArgs) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(args).stderr(Stdio::inherit());
    if shim.hide_proc_sys_net {
        use std::os::unix::process::CommandExt;
        let disks = ForeignDisks::of(&shim.exit_file, shim.volume_staging.as_deref());
        // SAFETY: the closure runs in the forked child before exec and only makes system
        // calls (unshare, mount, open, read, umount2) with pointers to static C strings or to
        // buffers on its own stack or made before the fork; it allocates nothing and touches
        // no lock of the parent.
        unsafe {
            cmd.pre_exec(move || {
                hide_proc_sys_net()?;
                disks.drop_copies();
                Ok(())
            });
        }
    }
    cmd
}

/// Serves the control socket until the second command arrives, runs it and returns its exit
/// code (or 137 when the container died waiting: `guest_closed` reads EOF once the guest
/// stream has ended).
///
/// It sleeps in poll(2) on both sockets: a target waits here for minutes, and the 5 ms accept
/// loop it replaced cost ~0.7 % of a core per target (issue 11).
fn second_stage(args: &ShimArgs, control: &PathBuf, guest_closed: &UnixStream) -> io::Result<i32> {
    use std::io::{BufRead, BufReader, Write};
    let _ = std::fs::remove_file(control);
    let listener = UnixListener::bind(control)?;
    if let Some(ready) = &args.ready_file {
        std::fs::write(ready, b"")?;
    }
    loop {
        if wait_readable(&listener, guest_closed)? == Woke::GuestClosed {
            eprintln!("shim: the container went away before its second stage");
            return Ok(137);
        }
        let (conn, _) = listener.accept()?;
        let mut line = String::new();
        BufReader::new(&conn).read_line(&mut line)?;
        let mut reply = &conn;
        let req: ControlRequest = match serde_json::from_str(&line) {
            Ok(r) => r,
            Err(e) => {
                let _ = writeln!(reply, "error: {e}");
                continue;
            }
        };
        let Some((program, rest)) = req.argv.split_first() else {
            let _ = writeln!(reply, "error: empty argv");
            continue;
        };
        let mut cmd = runsc_command(program, rest, args);
        cmd.stdin(Stdio::null()).stdout(Stdio::null());
        match cmd.spawn() {
            Ok(mut child) => {
                let _ = writeln!(reply, "ok");
                drop(conn);
                let status = child.wait()?;
                eprintln!("shim: runsc exited with {status}");
                return Ok(exit_code(status));
            }
            Err(e) => {
                let _ = writeln!(reply, "error: {e}");
            }
        }
    }
}

/// Writes the exit code to `path` atomically (temp file + rename), so a reader never sees a
/// half-written file.
fn write_exit(path: &Path, code: i32) -> io::Result<()> {
    output::flush();
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, code.to_string())?;
    std::fs::rename(&tmp, path)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn pump_guest_to_client(mut guest: UnixStream, client: Client) {
    loop {
        let frame = match read_frame(&mut guest) {
            Ok(f) => f,
            Err(FrameError::Closed) => return,
            Err(e) => {
                eprintln!("shim: guest stream: {e}");
                return;
            }
        };
        let mut current = lock(&client);
        if let Some(stream) = current.as_mut() {
            if write_frame(stream, &frame).is_err() {
                *current = None;
            }
        }
    }
}

/// What ended a [`wait_readable`].
#[derive(Debug, PartialEq, Eq)]
enum Woke {
    /// A client is waiting on the listener.
    Connection,
    /// The guest stream has ended (its signal socket reads EOF).
    GuestClosed,
}

/// Blocks until `listener` has a connection or `guest_closed` is readable (EOF: the guest
/// stream ended; a closed guest wins when both are ready). Interrupted waits are retried.
///
/// # Errors
/// poll(2)'s own errors.
fn wait_readable(listener: &UnixListener, guest_closed: &UnixStream) -> io::Result<Woke> {
    use std::os::fd::AsRawFd;
    let mut fds = [
        libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: guest_closed.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    loop {
        // SAFETY: `fds` is a live array of two pollfd structs whose descriptors are owned by
        // `listener` and `guest_closed`, both borrowed for the duration of the call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if fds[1].revents != 0 {
            return Ok(Woke::GuestClosed);
        }
        if fds[0].revents != 0 {
            return Ok(Woke::Connection);
        }
    }
}

fn accept_loop(listener: UnixListener, client: Client, to_guest: Arc<Mutex<UnixStream>>) {
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let Ok(reader) = conn.try_clone() else {
            continue;
        };
        if let Some(old) = lock(&client).replace(conn) {
            let _ = old.shutdown(std::net::Shutdown::Both);
        }
        let to_guest = to_guest.clone();
        std::thread::spawn(move || pump_client_to_guest(reader, to_guest));
    }
}

fn pump_client_to_guest(mut reader: UnixStream, to_guest: Arc<Mutex<UnixStream>>) {
    while let Ok(frame) = read_frame(&mut reader) {
        if write_frame(&mut *lock(&to_guest), &frame).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A container gone before its second stage ends the shim with 137: here the first stage
    /// leaves a process holding the container's stdout, which then exits (as a destroyed
    /// target's sandbox does). The shim itself must hold no copy of the container's end.
    #[test]
    fn a_two_stage_shim_ends_when_the_container_goes_before_its_second_stage() {
        let dir = std::env::temp_dir().join(format!("shim-test-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let args = ShimArgs {
            socket: Some(dir.join("guest.sock")),
            exit_file: dir.join("exit"),
            command: vec!["sh".into(), "-c".into(), "sleep 0.3 & exit 0".into()],
            hide_proc_sys_net: false,
            control: Some(dir.join("control.sock")),
            ready_file: Some(dir.join("ready")),
            volume_staging: None,
            log: None,
        };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(run(&args).map_err(|e| e.to_string()));
        });
        let code = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the shim still waits for a second stage of a container that is gone");
        assert_eq!(code, Ok(137));
        assert!(
            dir.join("ready").exists(),
            "the first stage was reported ready"
        );
        assert_eq!(std::fs::read_to_string(dir.join("exit")).unwrap(), "137");
        assert!(!dir.join("control.sock").exists() && !dir.join("guest.sock").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The second stage sleeps in poll(2) until a client connects or the guest stream ends.
    #[test]
    fn a_waiting_second_stage_wakes_for_a_client_and_for_the_end_of_the_guest() {
        let dir = std::env::temp_dir().join(format!("shim-wait-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let listener = UnixListener::bind(dir.join("control.sock")).unwrap();
        let (guest_closed, closed) = UnixStream::pair().unwrap();

        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let woke = wait_readable(&listener, &guest_closed).unwrap();
            tx.send(()).unwrap();
            (woke, listener, guest_closed)
        });
        assert!(
            rx.recv_timeout(Duration::from_millis(200)).is_err(),
            "woke with nothing to do"
        );
        let _client = UnixStream::connect(dir.join("control.sock")).unwrap();
        let (woke, listener, guest_closed) = waiter.join().unwrap();
        assert_eq!(woke, Woke::Connection);

        drop(closed);
        assert_eq!(
            wait_readable(&listener, &guest_closed).unwrap(),
            Woke::GuestClosed,
            "a closed guest wins over a pending client"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
