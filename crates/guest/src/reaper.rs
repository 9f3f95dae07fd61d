//! The one place that waits for children.
//!
//! As PID 1 the guest inherits every orphan in the sandbox and must reap them, but a blanket
//! `waitpid(-1)` would steal the exit status of a child an exec worker waits on. So one thread
//! peeks at the next exited child with `waitid(P_ALL, WEXITED | WNOWAIT)`, then, holding the
//! table lock, reaps that pid and hands its status to the callback registered for it (orphans
//! have none and are just reaped).
//!
//! [`Reaper::spawn`] forks while holding the same lock and registers the callback before
//! releasing it, so a child that exits at once is still routed to its waiter. It also covers the
//! standard library's own wait on a child whose `exec` failed: that wait happens inside
//! `Command::spawn`, under the lock, before the reaper can touch the pid.

use std::collections::HashMap;
use std::io;
use std::process::{Child, Command};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// How long the thread, with no child to wait for, sleeps before it looks again without being
/// woken. A safety net only: every child is made through [`Reaper::spawn`] or
/// [`Reaper::spawn_with`], which wake it. Every wake-up of an idle sandbox costs host CPU
/// under ptrace (measured here: a thread waking 20 times a second costs ~1 % of a core, ~0.5
/// ms each), so it was 1 s and cost an idle `base` sandbox ~0.05 % of a core (issue 11).
const IDLE_RECHECK: Duration = Duration::from_secs(60);

/// Called once with the raw wait status (as from `waitpid`) of the child it was registered for.
/// Runs on the reaper thread under its lock: it must not block.
pub type OnExit = Box<dyn FnOnce(i32) + Send>;

/// The reaper: a table of pid -> [`OnExit`] and the thread that serves it.
pub struct Reaper {
    table: Mutex<Table>,
    spawned: Condvar,
}

#[derive(Default)]
struct Table {
    waiters: HashMap<i32, OnExit>,
    /// Bumped at each spawn so the thread, idle with no children, knows to wait again.
    generation: u64,
}

impl Reaper {
    /// Starts the reaper thread.
    pub fn start() -> Arc<Reaper> {
        let reaper = Arc::new(Reaper {
            table: Mutex::new(Table::default()),
            spawned: Condvar::new(),
        });
        let r = Arc::clone(&reaper);
        let spawned = std::thread::Builder::new()
            .name("reaper".into())
            .spawn(move || r.serve());
        if let Err(e) = spawned {
            glog!("cannot start reaper thread: {e}");
        }
        reaper
    }

    /// Spawns `cmd` and registers `on_exit` for the child before anyone can reap it.
    ///
    /// # Errors
    /// The error of `Command::spawn` (e.g. `NotFound` when the program does not exist).
    pub fn spawn(&self, cmd: &mut Command, on_exit: OnExit) -> io::Result<Child> {
        let mut table = self.lock();
        let child = cmd.spawn()?;
        table.waiters.insert(child.id() as i32, on_exit);
        table.generation += 1;
        self.spawned.notify_all();
        Ok(child)
    }

    /// Runs `start` (which creates a child and returns its pid) under the table lock and
    /// registers `on_exit` for that pid before anyone can reap it.
    ///
    /// # Errors
    /// The error of `start`; `on_exit` is then dropped unused.
    pub fn spawn_with(
        &self,
        start: impl FnOnce() -> io::Result<i32>,
        on_exit: OnExit,
    ) -> io::Result<i32> {
        let mut table = self.lock();
        let pid = start()?;
        table.waiters.insert(pid, on_exit);
        table.generation += 1;
        self.spawned.notify_all();
        Ok(pid)
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        match self.table.lock() {
            Ok(t) => t,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn serve(&self) {
        loop {
            let seen = self.lock().generation;
            match peek_exited() {
                Ok(pid) => self.reap(pid),
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) if e.raw_os_error() == Some(libc::ECHILD) => self.wait_for_spawn(seen),
                Err(e) => {
                    glog!("waitid failed: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
    }

    fn reap(&self, pid: i32) {
        let mut table = self.lock();
        let mut status = 0;
        // SAFETY: `status` is a valid out-pointer for the duration of the call.
        let got = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if got == pid {
            if let Some(on_exit) = table.waiters.remove(&pid) {
                on_exit(status);
            }
        }
    }

    fn wait_for_spawn(&self, seen: u64) {
        let mut table = self.lock();
        while table.generation == seen {
            table = match self.spawned.wait_timeout(table, IDLE_RECHECK) {
                Ok((t, _)) => t,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }
}

/// Blocks until some child has exited and returns its pid, leaving it a zombie.
fn peek_exited() -> io::Result<i32> {
    // SAFETY: siginfo_t is plain data for which all-zero bytes are a valid value.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is a valid out-pointer for the duration of the call.
    let r = unsafe { libc::waitid(libc::P_ALL, 0, &mut info, libc::WEXITED | libc::WNOWAIT) };
    if r == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: waitid succeeded with WEXITED, so the kernel filled in the child fields.
    Ok(unsafe { info.si_pid() })
}

/// The shell's view of a wait status: the exit code, or 128 + the signal that killed it.
pub fn exit_code(status: i32) -> i32 {
    if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        libc::WEXITSTATUS(status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    // The reaper, not `Child::wait`, collects these children.
    #[allow(clippy::zombie_processes)]
    fn routes_status_to_waiter() {
        let reaper = Reaper::start();
        let (tx, rx) = mpsc::channel();
        let tx2 = tx.clone();
        reaper
            .spawn(
                Command::new("/bin/sh").args(["-c", "exit 7"]),
                Box::new(move |s| {
                    let _ = tx.send(exit_code(s));
                }),
            )
            .unwrap();
        reaper
            .spawn(
                Command::new("/bin/sh").args(["-c", "kill -9 $$"]),
                Box::new(move |s| {
                    let _ = tx2.send(exit_code(s));
                }),
            )
            .unwrap();
        let mut got = vec![rx.recv_timeout(Duration::from_secs(5)).unwrap()];
        got.push(rx.recv_timeout(Duration::from_secs(5)).unwrap());
        got.sort();
        assert_eq!(got, vec![7, 137]);
        let missing = reaper.spawn(&mut Command::new("/nonexistent/x"), Box::new(|_| {}));
        assert_eq!(missing.unwrap_err().kind(), io::ErrorKind::NotFound);
    }
}
