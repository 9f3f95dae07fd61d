//! The exec worker: one thread per exec that polls both output pipes and an exit notification,
//! forwards output as soon as it is read (live streaming), enforces the timeout and sends
//! `Exited` last. (One thread, not three: under ptrace a thread start costs ~1 ms.)
//!
//! A background grandchild may keep the pipes open forever, so after the main process exits
//! the worker waits at most [`PIPE_GRACE_MS`] more for them. At `timeout_ms` the whole process
//! group is killed and the exec reports `timed_out`.

use super::command_line::{plan, Plan};
use super::spawn::{context, prewarm, spawn, Child, Spawned};
use super::{kill_group, Request};
use crate::dispatch::Ctx;
use crate::error::OpError;
use crate::reaper::{exit_code, OnExit};
use pandastack_guest_protocol::{ErrorCode, GuestMsg, OutputStream, RequestId};
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::io::{AsRawFd, FromRawFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long to wait for the pipes after the main process exited, ms.
pub const PIPE_GRACE_MS: u64 = 100;
/// Largest `Output` body, bytes.
pub const CHUNK_BYTES: usize = 64 * 1024;

/// Spawns exec `id` and starts its worker thread.
pub fn start(ctx: &Ctx, id: RequestId, req: Request) -> Result<(), OpError> {
    let started = Instant::now();
    let status: Arc<Mutex<Option<i32>>> = Arc::default();
    let (note_r, note_w) = notify_pipe().map_err(|e| OpError::io("exit notification", &e))?;
    // Each callback made gets its own handle on the write end; one dropped unused (a failed
    // first spawn attempt) must not look like an exit, so ours stays open until `start` returns.
    let on_exit = || -> OnExit {
        let s = Arc::clone(&status);
        let w = note_w.try_clone().ok();
        Box::new(move |st| {
            if let Ok(mut slot) = s.lock() {
                *slot = Some(st);
            }
            if let Some(mut w) = w {
                let _ = w.write_all(&[1]);
            }
        })
    };
    let child = match spawn(
        &ctx.reaper,
        &ctx.execs.warm,
        &ctx.config.env,
        &ctx.config.cwd,
        &req,
        &on_exit,
    )? {
        Spawned::Running(child) => child,
        Spawned::Failed { exit_code, stderr } => {
            ctx.out.send_with(
                &GuestMsg::Output {
                    id,
                    stream: OutputStream::Stderr,
                },
                stderr.into_bytes(),
            );
            let duration_ms = started.elapsed().as_millis() as u64;
            ctx.out.send(&GuestMsg::Exited {
                id,
                exit_code,
                timed_out: false,
                duration_ms,
            });
            return Ok(());
        }
    };
    drop(note_w);
    let pgid = child.pid;
    let uses_shell = matches!(plan(&req.cmd), Plan::Shell);
    ctx.execs.insert(id, pgid);
    let c = ctx.clone();
    let deadline = req.timeout_ms.map(|ms| started + Duration::from_millis(ms));
    let worker = std::thread::Builder::new().spawn(move || {
        let (st, timed_out) = watch(&c, id, child, note_r, &status, deadline);
        c.execs.remove(id);
        // Say why when the memory guard killed one of its processes (it exits 137 then).
        if let Some(kill) = c.memory.killed_in_group(pgid, started) {
            c.out.send_with(
                &GuestMsg::Output {
                    id,
                    stream: OutputStream::Stderr,
                },
                crate::memory::exec_note(&kill).into_bytes(),
            );
        }
        let exit_code = st.map(exit_code).unwrap_or(-1);
        let duration_ms = started.elapsed().as_millis() as u64;
        c.out.send(&GuestMsg::Exited {
            id,
            exit_code,
            timed_out,
            duration_ms,
        });
        // Start the next shell exec's bash now, off the reply path (see `warm`).
        if uses_shell {
            let (env, cwd) = context(&c.config.env, &c.config.cwd, &req);
            prewarm(&c.reaper, &c.execs.warm, &env, &cwd);
        }
    });
    if let Err(e) = worker {
        kill_group(pgid);
        ctx.execs.remove(id);
        return Err(OpError::new(
            ErrorCode::Io,
            format!("cannot start exec worker: {e}"),
        ));
    }
    Ok(())
}

fn notify_pipe() -> std::io::Result<(File, File)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid out-array of two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: pipe2 returned two fresh fds that nothing else owns.
    Ok(unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) })
}

/// Polls output and exit until the exec is over. Returns the raw wait status and whether the
/// timeout fired.
fn watch(
    ctx: &Ctx,
    id: RequestId,
    child: Child,
    mut note: File,
    status: &Mutex<Option<i32>>,
    deadline: Option<Instant>,
) -> (Option<i32>, bool) {
    let Child {
        mut stdout,
        mut stderr,
        pid,
    } = child;
    let mut open = [true, true, true];
    let mut exited_at: Option<Instant> = None;
    let mut timed_out = false;
    let mut buf = vec![0u8; CHUNK_BYTES];
    loop {
        let now = Instant::now();
        if let Some(at) = exited_at {
            if (!open[0] && !open[1]) || now >= at + Duration::from_millis(PIPE_GRACE_MS) {
                break;
            }
        }
        if !timed_out && deadline.is_some_and(|d| now >= d) {
            kill_group(pid);
            timed_out = true;
        }
        let wake = [
            exited_at.map(|at| at + Duration::from_millis(PIPE_GRACE_MS)),
            deadline.filter(|_| !timed_out),
        ]
        .into_iter()
        .flatten()
        .min();
        let timeout_ms = wake.map_or(-1, |w| {
            w.saturating_duration_since(now)
                .as_millis()
                .min(i32::MAX as u128) as i32
                + 1
        });
        let fds = [stdout.as_raw_fd(), stderr.as_raw_fd(), note.as_raw_fd()];
        let mut pfds: Vec<libc::pollfd> = (0..3)
            .filter(|i| open[*i])
            .map(|i| libc::pollfd {
                fd: fds[i],
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: `pfds` is a valid array of `pfds.len()` pollfds for the duration of the call.
        let n = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout_ms) };
        if n < 0 {
            continue; // EINTR
        }
        for p in pfds.iter().filter(|p| p.revents != 0) {
            let idx = fds.iter().position(|fd| *fd == p.fd).unwrap_or(2);
            let got = match idx {
                0 => stdout.read(&mut buf),
                1 => stderr.read(&mut buf),
                _ => note.read(&mut buf),
            };
            match (idx, got) {
                (2, _) => {
                    open[2] = false;
                    exited_at.get_or_insert_with(Instant::now);
                }
                (_, Ok(0)) | (_, Err(_)) => open[idx] = false,
                (_, Ok(n)) => {
                    let stream = if idx == 0 {
                        OutputStream::Stdout
                    } else {
                        OutputStream::Stderr
                    };
                    ctx.out
                        .send_with(&GuestMsg::Output { id, stream }, buf[..n].to_vec());
                }
            }
        }
    }
    let st = status.lock().ok().and_then(|s| *s);
    (st, timed_out)
}
