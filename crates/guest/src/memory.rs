//! The memory guard: when the sandbox runs out of memory, one process dies, not the sandbox.
//!
//! gVisor has no OOM killer of its own (runsc 20240729: its cgroupfs `memory.limit_in_bytes`
//! is a stub, `oom_score` is a constant, `--total-memory` only sets the `MemTotal` the sandbox
//! reports). The only limit is the host's memory cgroup around the whole sandbox, and the host
//! kernel's OOM killer then ends the sentry: every process and kernel of the sandbox at once.
//! So the guest watches the memory use the sentry reports and acts first (issue 8 point 3:
//! "a process over the limit is killed alone inside the sandbox").
//!
//! # Rule
//! The guard reads `/proc/meminfo` ([`poll_interval`]: the sooner the nearer the limit): the limit is `MemTotal` (runsc sets it
//! to the memory cgroup's limit when the sandbox starts, i.e. the create's `memory_mb`; the
//! host raises the cgroup itself by a headroom afterwards, see
//! `pandastack_gvisor::cgroup::headroom_bytes`) and the use is `MemTotal -
//! MemAvailable` (application memory, page cache of the sandbox's files, tmpfs such as
//! `/dev/shm`). When the use passes `MemTotal - `[`margin`], it SIGKILLs the user process with
//! the largest resident set (never itself, PID 1; see [`choose`] for when it kills the whole
//! process group instead), with every other process stopped (SIGSTOP) while it chooses and
//! kills, records the kill ([`OomKill`]: reported to
//! the host in the next `Pong`, which records a sandbox event naming the process and `oom`),
//! and waits until the victim is gone before it looks again. An exec whose process was killed
//! exits 137 (128 + SIGKILL) and gets a line on stderr saying why; a kernel that was killed
//! answers its run with `OutOfMemory`.
//!
//! While the host holds a lease ([`MemoryGuard::lease`]: it samples the sandbox's memory
//! cgroup itself, every 100 ms, and the use is below half of the limit) the guard does not
//! look at all; the host takes the lease back the moment the use reaches half.
//!
//! The numbers behind [`MAX_GROWTH_BYTES_PER_MS`], [`margin`] and the host's headroom were
//! measured here (ptrace platform, 2 loaded cores); see `docs/ARCHITECTURE.md` ("Memory
//! guard").

use pandastack_guest_protocol::OomKill;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Fastest growth of memory use the guard plans for, bytes per ms (2 MiB/ms). Measured here:
/// a Python loop touching 1 MiB blocks, or one `bytearray(100 MiB)`, grows by 0.8-1.2 MiB/ms
/// under gVisor's ptrace platform (every new page is a fault the sentry serves).
pub const MAX_GROWTH_BYTES_PER_MS: u64 = 2 * 1024 * 1024;
/// Shortest pause between two looks, ms (near the limit).
pub const MIN_POLL_MS: u64 = 10;
/// Longest pause between two looks, ms (far below the limit), when the host holds no lease. A
/// look is a wake-up that costs ~0.5 ms of host CPU under ptrace (measured): an idle 512 MiB
/// sandbox looks every ~220 ms ([`poll_interval`]), an idle 1 GiB one every ~440 ms, ~0.25 and
/// ~0.13 % of a core (issue 11: idle CPU; hence [`MemoryGuard::lease`]). The host's headroom
/// (`pandastack_gvisor::cgroup::headroom_bytes`, 736 MiB at 1 GiB) covers far more than what
/// an allocation at the planned rate adds between two looks.
pub const MAX_POLL_MS: u64 = 500;
/// The guard acts at `MemTotal - margin`; the margin is this share of `MemTotal`...
pub const MARGIN_DIVISOR: u64 = 32;
/// ...but at least this many bytes (16 MiB).
pub const MIN_MARGIN_BYTES: u64 = 16 * 1024 * 1024;
/// Longest wait for a killed process to be gone before the guard looks again, ms.
pub const VICTIM_WAIT_MS: u64 = 2000;
/// Longest wait after a kill for the use to read below the mark again before the guard may
/// kill once more, ms.
pub const SETTLE_MS: u64 = 1500;
/// Longest wait of [`MemoryGuard::killed_soon`] for a kill to be recorded, ms.
pub const RECORD_WAIT_MS: u64 = 500;
/// Kills remembered for execs and kernels asking whether theirs was one.
const REMEMBERED: usize = 64;

/// The bytes below `MemTotal` at which the guard acts: `total / 32`, at least 16 MiB.
pub fn margin(total_bytes: u64) -> u64 {
    (total_bytes / MARGIN_DIVISOR).max(MIN_MARGIN_BYTES)
}

/// How long the guard may sleep when `used` bytes of a limit that acts at `threshold` bytes
/// are in use: the time the fastest allocation ([`MAX_GROWTH_BYTES_PER_MS`]) needs to reach
/// the threshold, within [`MIN_POLL_MS`]..=[`MAX_POLL_MS`].
pub fn poll_interval(used: u64, threshold: u64) -> Duration {
    let ms = threshold.saturating_sub(used) / MAX_GROWTH_BYTES_PER_MS;
    Duration::from_millis(ms.clamp(MIN_POLL_MS, MAX_POLL_MS))
}

/// When a rest that would end at `plain_end` ends at `now` under a lease held `until`: the
/// later of the two while the lease holds.
fn rest_end(until: Option<Instant>, now: Instant, plain_end: Instant) -> Instant {
    match until {
        Some(u) if u > now => u.max(plain_end),
        _ => plain_end,
    }
}

/// One kill: who, in which process group, when, and what the host is told.
#[derive(Debug, Clone)]
struct Kill {
    pid: i32,
    pgid: i32,
    /// The whole process group `pgid` was killed.
    group: bool,
    at: Instant,
    report: OomKill,
}

#[derive(Default)]
struct Kills {
    recent: VecDeque<Kill>,
    unreported: Vec<OomKill>,
}

/// The host's promise to watch the sandbox's memory from outside (see [`MemoryGuard::lease`]).
#[derive(Default)]
struct Lease {
    /// The guard need not look before this (`None`: it looks as [`poll_interval`] says).
    until: Option<Instant>,
    /// Bumped when the host takes its lease back: the guard looks at once.
    revoked: u64,
}

/// The longest lease the guard accepts, ms: if the host stops renewing (its server is gone),
/// the guard looks for itself again after at most this long.
pub const MAX_LEASE_MS: u64 = 30_000;

/// The guard's record of its kills and the host's lease; the thread itself is started by
/// [`MemoryGuard::start`].
#[derive(Default)]
pub struct MemoryGuard {
    kills: Mutex<Kills>,
    lease: Mutex<Lease>,
    lease_changed: Condvar,
}

impl MemoryGuard {
    /// Starts the guard thread (only in a sandbox: as PID 1, where every other process is the
    /// sandbox's; outside one it would kill host processes). Logs and carries on when the
    /// thread cannot start: the sandbox then has only the host's whole-sandbox limit.
    pub fn start(self: &Arc<Self>) {
        let guard = Arc::clone(self);
        let started = std::thread::Builder::new()
            .name("memory-guard".into())
            .spawn(move || guard.watch());
        if let Err(e) = started {
            glog!("cannot start the memory guard: {e}");
        }
    }

    /// The kill of process `pid` at or after `since`, if the guard killed it (alone, or with
    /// the process group it leads).
    pub fn killed(&self, pid: i32, since: Instant) -> Option<OomKill> {
        self.find(|k| (k.pid == pid || (k.group && k.pgid == pid)) && k.at >= since)
    }

    /// As [`MemoryGuard::killed`], waiting up to [`RECORD_WAIT_MS`] for the record when there
    /// is none yet: a process can die of the sandbox's memory running out a moment before
    /// the guard, which saw it first, records its kill.
    pub fn killed_soon(&self, pid: i32, since: Instant) -> Option<OomKill> {
        let deadline = Instant::now() + Duration::from_millis(RECORD_WAIT_MS);
        loop {
            if let Some(kill) = self.killed(pid, since) {
                return Some(kill);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The first kill of a process in group `pgid` at or after `since` (an exec's processes
    /// share its group).
    pub fn killed_in_group(&self, pgid: i32, since: Instant) -> Option<OomKill> {
        self.find(|k| k.pgid == pgid && k.at >= since)
    }

    /// The host's lease on watching this sandbox's memory (issue 11, idle CPU; the host's
    /// `memory_watch`): `ms` > 0 means the host samples the sandbox's memory cgroup often
    /// enough to warn before the use can reach the guard's mark, so the guard stops looking
    /// for `ms` (at most [`MAX_LEASE_MS`]); each look costs an idle sandbox a wake-up under
    /// ptrace (~0.5 ms of host CPU), 2-4 a second without a lease. `ms` 0 takes the lease
    /// back: the use is high, and the guard looks at once and then as [`poll_interval`] says.
    pub fn lease(&self, ms: u64) {
        let mut lease = self.lease.lock().unwrap_or_else(|e| e.into_inner());
        if ms == 0 {
            lease.until = None;
            lease.revoked += 1;
            self.lease_changed.notify_all();
        } else {
            lease.until = Some(Instant::now() + Duration::from_millis(ms.min(MAX_LEASE_MS)));
        }
    }

    /// Sleeps `pause`, and on for as long as the host's lease holds; returns at once when the
    /// host takes the lease back.
    fn rest(&self, pause: Duration) {
        let plain_end = Instant::now() + pause;
        let mut lease = self.lease.lock().unwrap_or_else(|e| e.into_inner());
        let seen = lease.revoked;
        loop {
            if lease.revoked != seen {
                return;
            }
            let now = Instant::now();
            let end = rest_end(lease.until, now, plain_end);
            if now >= end {
                return;
            }
            lease = match self.lease_changed.wait_timeout(lease, end - now) {
                Ok((l, _)) => l,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }

    /// The kills not yet reported to the host, oldest first; each is returned once.
    pub fn take_unreported(&self) -> Vec<OomKill> {
        std::mem::take(&mut self.lock().unreported)
    }

    fn find(&self, want: impl Fn(&Kill) -> bool) -> Option<OomKill> {
        self.lock()
            .recent
            .iter()
            .find(|k| want(k))
            .map(|k| k.report.clone())
    }

    fn lock(&self) -> MutexGuard<'_, Kills> {
        match self.kills.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn record(&self, kill: Kill) {
        let mut kills = self.lock();
        kills.unreported.push(kill.report.clone());
        if kills.unreported.len() > REMEMBERED {
            kills.unreported.remove(0);
        }
        kills.recent.push_back(kill);
        if kills.recent.len() > REMEMBERED {
            kills.recent.pop_front();
        }
    }

    fn watch(&self) {
        let me = std::process::id() as i32;
        let mut meminfo = MeminfoReader::default();
        let mut found_nothing = false;
        let mut pause = Duration::from_millis(MIN_POLL_MS);
        loop {
            self.rest(pause);
            let Some(mem) = meminfo.read() else {
                pause = Duration::from_millis(MAX_POLL_MS);
                continue;
            };
            let threshold = mem.total.saturating_sub(margin(mem.total));
            pause = poll_interval(mem.used(), threshold);
            if mem.used() < threshold {
                continue;
            }
            // Everything else stands still while the guard chooses and kills: a swarm of busy
            // processes would otherwise get the CPU between each of the guard's hundreds of
            // /proc reads and grow past the host's limit first. Not again right after a look
            // that found nothing to kill (memory held by tmpfs files), which would stop and
            // continue every process at each look.
            let frozen = (!found_nothing).then(Frozen::all);
            let Some(victim) = choose(&processes(me)) else {
                found_nothing = true;
                continue;
            };
            found_nothing = false;
            let report = OomKill {
                pid: victim.lead.pid as u32,
                name: victim.lead.name.clone(),
                processes: victim.processes,
                rss_bytes: victim.rss_bytes,
                used_bytes: mem.used(),
                limit_bytes: mem.total,
                at_ms: now_ms(),
            };
            glog!("{}", exec_note(&report).trim_end());
            // Recorded before the kill, so whoever sees the process die finds the reason.
            self.record(Kill {
                pid: victim.lead.pid,
                pgid: victim.lead.pgid,
                group: victim.group,
                at: Instant::now(),
                report,
            });
            if victim.group {
                kill_group_until_gone(victim.lead.pgid);
            } else {
                // SAFETY: kill takes plain integers; the pid was just read from /proc and is
                // not PID 1 (the guard's own process).
                unsafe {
                    libc::kill(victim.lead.pid, libc::SIGKILL);
                }
                wait_gone(victim.lead.pid);
            }
            drop(frozen);
            // The sentry's accounting of the freed memory lags the victim's exit (its usage
            // scans are throttled): until it shows, the use still reads high, and looking
            // again at once would kill an innocent second process (seen here: the hog, then
            // the shell that started it).
            settle(&mut meminfo, threshold);
        }
    }
}

/// Waits until the use reads below `threshold`, at most [`SETTLE_MS`].
fn settle(meminfo: &mut MeminfoReader, threshold: u64) {
    let deadline = Instant::now() + Duration::from_millis(SETTLE_MS);
    while Instant::now() < deadline {
        if meminfo.read().is_some_and(|m| m.used() < threshold) {
            return;
        }
        std::thread::sleep(Duration::from_millis(MIN_POLL_MS));
    }
}

/// Every process of the sandbox but PID 1 (the guest) stopped with SIGSTOP, until dropped
/// (SIGCONT). A killed process still exits while stopped, so the guard's kill and its wait
/// for the victim work as usual. A process the user had stopped on purpose is continued too.
struct Frozen;

impl Frozen {
    fn all() -> Self {
        // SAFETY: kill takes plain integers; pid -1 from PID 1 addresses every process of the
        // sandbox but PID 1 itself (kill(2)), and SIGSTOP touches no memory of ours.
        unsafe {
            libc::kill(-1, libc::SIGSTOP);
        }
        Frozen
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        // SAFETY: as in `Frozen::all`.
        unsafe {
            libc::kill(-1, libc::SIGCONT);
        }
    }
}

/// The line an exec's stderr gets (and the guest logs) when the guard killed one of its
/// processes, or its whole process group.
pub fn exec_note(kill: &OomKill) -> String {
    format!("pandastack: out of memory: {}\n", kill.describe())
}

/// `MemTotal` and `MemAvailable` of `/proc/meminfo`, bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemInfo {
    pub total: u64,
    pub available: u64,
}

impl MemInfo {
    /// Bytes in use: `total - available`.
    pub fn used(&self) -> u64 {
        self.total.saturating_sub(self.available)
    }
}

/// `/proc/meminfo` kept open: each look is one `pread` (one system call, where opening the
/// file anew costs three, each a scheduling round of the sentry when many processes are busy).
#[derive(Default)]
struct MeminfoReader {
    file: Option<std::fs::File>,
    buf: Vec<u8>,
}

impl MeminfoReader {
    fn read(&mut self) -> Option<MemInfo> {
        use std::os::unix::fs::FileExt;
        let file = match self.file.take() {
            Some(f) => f,
            None => std::fs::File::open("/proc/meminfo").ok()?,
        };
        self.buf.resize(8192, 0);
        let n = file.read_at(&mut self.buf, 0).ok()?;
        let mem = parse_meminfo(std::str::from_utf8(&self.buf[..n]).ok()?);
        // Kept for the next look only when it answered (else reopened then).
        if mem.is_some() {
            self.file = Some(file);
        }
        mem
    }
}

/// Parses the `MemTotal:` and `MemAvailable:` lines (kB) of a `/proc/meminfo` text.
pub fn parse_meminfo(text: &str) -> Option<MemInfo> {
    let field = |name: &str| {
        text.lines().find_map(|l| {
            l.strip_prefix(name)?
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
    };
    Some(MemInfo {
        total: field("MemTotal:")? * 1024,
        available: field("MemAvailable:")? * 1024,
    })
}

/// A process the guard may kill.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Candidate {
    pid: i32,
    pgid: i32,
    name: String,
    rss_bytes: u64,
}

/// Every process but `me` and PID 1 with its resident set (one read of `/proc/<pid>/stat`
/// each: it holds the name, the process group and the resident pages).
fn processes(me: i32) -> Vec<Candidate> {
    let page = page_size();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me && pid > 1)
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (name, pgid, rss_pages) = parse_stat(&stat)?;
            Some(Candidate {
                pid,
                pgid,
                name,
                rss_bytes: rss_pages * page,
            })
        })
        .filter(|c| c.rss_bytes > 0)
        .collect()
}

/// What the guard kills: the largest process alone, or its whole process group.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Victim {
    /// The group's largest process (the one killed when `group` is false).
    lead: Candidate,
    group: bool,
    /// Processes killed.
    processes: u32,
    /// Their resident memory together, bytes (shared pages counted in each).
    rss_bytes: u64,
}

/// The rule: the process group holding the most resident memory (an exec's or a kernel's
/// processes share one) is the culprit. Its largest process is killed alone when it holds at
/// least half of the group's memory (one hog: its shell and siblings live on); else the whole
/// group is (many small processes, such as a fork loop, where killing one at a time cannot keep
/// up with new forks). Groups 0 and 1 are never killed whole (PID 1's own).
fn choose(procs: &[Candidate]) -> Option<Victim> {
    let mut groups: std::collections::HashMap<i32, (u64, u32, &Candidate)> =
        std::collections::HashMap::new();
    for c in procs {
        let g = groups.entry(c.pgid).or_insert((0, 0, c));
        g.0 += c.rss_bytes;
        g.1 += 1;
        if c.rss_bytes > g.2.rss_bytes {
            g.2 = c;
        }
    }
    let (&pgid, &(sum, count, lead)) = groups.iter().max_by_key(|(_, g)| g.0)?;
    let whole = pgid > 1 && count > 1 && lead.rss_bytes * 2 < sum;
    Some(if whole {
        Victim {
            lead: lead.clone(),
            group: true,
            processes: count,
            rss_bytes: sum,
        }
    } else {
        Victim {
            lead: lead.clone(),
            group: false,
            processes: 1,
            rss_bytes: lead.rss_bytes,
        }
    })
}

/// The command name, process group and resident pages of a `/proc/<pid>/stat` line (`pid
/// (comm) state ppid pgrp ... vsize rss ...`, fields 5 and 24; the name may hold spaces and
/// parentheses, so it ends at the last `)`).
fn parse_stat(stat: &str) -> Option<(String, i32, u64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat.get(open + 1..close)?.to_string();
    let fields: Vec<&str> = stat.get(close + 1..)?.split_whitespace().collect();
    // fields[0] is field 3 (state).
    let pgid = fields.get(2)?.parse().ok()?;
    let rss_pages = fields.get(21)?.parse().ok()?;
    Some((name, pgid, rss_pages))
}

/// Waits until `pid` no longer exists or is a zombie (its memory is freed then), at most
/// [`VICTIM_WAIT_MS`].
fn wait_gone(pid: i32) {
    let deadline = Instant::now() + Duration::from_millis(VICTIM_WAIT_MS);
    while Instant::now() < deadline {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                Some(
                    s.get(s.rfind(')')? + 1..)?
                        .split_whitespace()
                        .next()?
                        .to_string(),
                )
            });
        match state.as_deref() {
            None | Some("Z") | Some("X") => return,
            _ => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// SIGKILLs process group `pgid` (> 1) until none of its processes is left alive (a fork in
/// flight may add one after a kill), at most [`VICTIM_WAIT_MS`].
fn kill_group_until_gone(pgid: i32) {
    if pgid <= 1 {
        return;
    }
    let deadline = Instant::now() + Duration::from_millis(VICTIM_WAIT_MS);
    while Instant::now() < deadline {
        // SAFETY: kill takes plain integers; a negative pid addresses group `pgid` (> 1, so
        // never -1, "every process").
        let sent = unsafe { libc::kill(-pgid, libc::SIGKILL) };
        if sent != 0 {
            return; // ESRCH: the group is gone
        }
        let alive = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
            .any(|stat| {
                let after = stat
                    .rfind(')')
                    .and_then(|i| stat.get(i + 1..))
                    .unwrap_or("");
                let mut f = after.split_whitespace();
                let state = f.next().unwrap_or("Z");
                state != "Z" && state != "X" && f.nth(1).and_then(|g| g.parse().ok()) == Some(pgid)
            });
        if !alive {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn page_size() -> u64 {
    // SAFETY: sysconf takes an integer and reads no memory of ours.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rest_lasts_while_the_lease_holds() {
        let now = Instant::now();
        let plain = now + Duration::from_millis(200);
        assert_eq!(rest_end(None, now, plain), plain);
        let lease = now + Duration::from_secs(10);
        assert_eq!(rest_end(Some(lease), now, plain), lease);
        let short = now + Duration::from_millis(50);
        assert_eq!(
            rest_end(Some(short), now, plain),
            plain,
            "a lease ending first"
        );
        assert_eq!(rest_end(Some(now), now, plain), plain, "an expired lease");
    }

    #[test]
    fn the_guard_rests_under_a_lease_and_looks_at_once_when_it_is_taken_back() {
        let guard = Arc::new(MemoryGuard::default());
        guard.lease(u64::MAX); // capped at MAX_LEASE_MS
        let until = guard.lease.lock().unwrap().until.unwrap();
        assert!(until <= Instant::now() + Duration::from_millis(MAX_LEASE_MS));
        let (tx, rx) = std::sync::mpsc::channel();
        let g = Arc::clone(&guard);
        std::thread::spawn(move || {
            let started = Instant::now();
            g.rest(Duration::from_millis(10));
            tx.send(started.elapsed()).unwrap();
        });
        assert!(
            rx.recv_timeout(Duration::from_millis(300)).is_err(),
            "rested only its plain pause under a lease"
        );
        guard.lease(0);
        let rested = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("woke when taken back");
        assert!(rested < Duration::from_secs(5), "{rested:?}");
        // Without a lease a rest is its plain pause.
        let started = Instant::now();
        guard.rest(Duration::from_millis(20));
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn meminfo_gives_total_and_use_in_bytes() {
        let text = "MemTotal:         524288 kB\nMemFree:          100000 kB\nMemAvailable:     100000 kB\nCached: 5 kB\n";
        let m = parse_meminfo(text).expect("parses");
        assert_eq!(m.total, 512 * 1024 * 1024);
        assert_eq!(m.used(), (524_288 - 100_000) * 1024);
        assert_eq!(parse_meminfo("MemTotal: 1 kB\n"), None);
    }

    #[test]
    fn margin_is_a_share_of_the_limit_with_a_floor() {
        assert_eq!(margin(512 << 20), 16 << 20);
        assert_eq!(margin(4096 << 20), 128 << 20);
        assert_eq!(margin(128 << 20), MIN_MARGIN_BYTES);
    }

    #[test]
    fn the_guard_looks_sooner_the_nearer_the_limit() {
        let t = 496 << 20;
        assert_eq!(poll_interval(0, t), Duration::from_millis(248));
        assert_eq!(
            poll_interval(0, 4096 << 20),
            Duration::from_millis(MAX_POLL_MS)
        );
        assert_eq!(poll_interval(t - (100 << 20), t), Duration::from_millis(50));
        assert_eq!(
            poll_interval(t - (4 << 20), t),
            Duration::from_millis(MIN_POLL_MS)
        );
        assert_eq!(poll_interval(t + 1, t), Duration::from_millis(MIN_POLL_MS));
    }

    fn proc(pid: i32, pgid: i32, mib: u64) -> Candidate {
        Candidate {
            pid,
            pgid,
            name: format!("p{pid}"),
            rss_bytes: mib << 20,
        }
    }

    #[test]
    fn one_hog_dies_alone_and_a_swarm_dies_as_a_group() {
        // An exec's bash (4 MiB) and its python hog (480 MiB); a kernel (100 MiB).
        let hog = [proc(10, 10, 4), proc(11, 10, 480), proc(20, 20, 100)];
        let v = choose(&hog).expect("a victim");
        assert_eq!((v.lead.pid, v.group, v.processes), (11, false, 1));
        // A fork loop: 200 processes of 3 MiB in group 30 beat the 100 MiB kernel.
        let mut swarm: Vec<Candidate> = (0..200).map(|i| proc(100 + i, 30, 3)).collect();
        swarm.push(proc(20, 20, 100));
        let v = choose(&swarm).expect("a victim");
        assert_eq!((v.lead.pgid, v.group, v.processes), (30, true, 200));
        assert_eq!(v.rss_bytes, 600 << 20);
        // Orphans in PID 1's group are never killed as a group.
        let orphans: Vec<Candidate> = (0..10).map(|i| proc(100 + i, 1, 3)).collect();
        assert!(!choose(&orphans).expect("a victim").group);
        assert_eq!(choose(&[]), None);
    }

    #[test]
    fn a_group_kill_counts_for_its_leader() {
        let g = MemoryGuard::default();
        let before = Instant::now();
        let report = OomKill {
            pid: 31,
            name: "python3".into(),
            processes: 200,
            rss_bytes: 600 << 20,
            used_bytes: 500 << 20,
            limit_bytes: 512 << 20,
            at_ms: 1,
        };
        g.record(Kill {
            pid: 31,
            pgid: 30,
            group: true,
            at: Instant::now(),
            report: report.clone(),
        });
        assert_eq!(g.killed(30, before), Some(report.clone()));
        assert!(exec_note(&report).contains("killed python3 (pid 31) and 199 more processes of its group (600 MiB resident together)"));
    }

    #[test]
    fn stat_names_survive_spaces_and_parentheses() {
        // gVisor's format (runsc 20240729): fields 3 to 24, rss = 1234 pages.
        let line = "42 (my (odd) prog) R 1 40 40 0 -1 0 0 0 0 0 5 3 0 0 20 0 1 0 77 123456789 1234 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0";
        assert_eq!(
            parse_stat(line),
            Some(("my (odd) prog".to_string(), 40, 1234))
        );
        assert_eq!(parse_stat("42 (short) R 1 40 40"), None);
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn kills_are_found_by_pid_and_group_and_reported_once() {
        let g = MemoryGuard::default();
        let before = Instant::now();
        let report = OomKill {
            pid: 7,
            name: "python3".into(),
            processes: 1,
            rss_bytes: 1 << 29,
            used_bytes: 500 << 20,
            limit_bytes: 512 << 20,
            at_ms: 1,
        };
        g.record(Kill {
            pid: 7,
            pgid: 5,
            group: false,
            at: Instant::now(),
            report: report.clone(),
        });
        assert_eq!(g.killed(7, before), Some(report.clone()));
        assert_eq!(g.killed_in_group(5, before), Some(report.clone()));
        assert_eq!(g.killed(8, before), None);
        assert_eq!(g.killed(7, Instant::now() + Duration::from_secs(1)), None);
        assert_eq!(g.take_unreported(), vec![report]);
        assert!(g.take_unreported().is_empty());
        assert!(exec_note(&g.killed(7, before).expect("kept"))
            .contains("killed python3 (pid 7, 512 MiB resident)"));
    }
}
