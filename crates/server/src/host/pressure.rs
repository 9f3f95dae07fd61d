//! Is this host starved? The health monitor asks before it counts a guest's silence against it
//! (issue 23 finding 11: at a load average of ~28 every probe timed out and 17 healthy
//! sandboxes were destroyed). A host is starved while any of these holds:
//! - this server's own event loop ran late by [`LAG_STARVED`] or more within the last
//!   [`LAG_MEMORY`] (a probe that waits for the loop is not the guest's fault);
//! - the kernel's CPU pressure (`/proc/pressure/cpu`, `some avg10`: the share of the last 10 s
//!   in which at least one runnable task waited for a CPU) is [`CPU_SOME_STARVED`] % or more;
//! - its IO pressure (`/proc/pressure/io`, `full avg10`: the share in which every non-idle task
//!   waited for IO) is [`IO_FULL_STARVED`] % or more.
//!
//! Without PSI (a kernel built without it) only the loop lag counts.

use std::sync::Mutex;
use std::time::{Duration, Instant};
use tracing::info;

/// How often the loop-lag sampler wakes.
pub const LAG_TICK: Duration = Duration::from_millis(100);
/// A wake-up this late or later means the loop is starved.
pub const LAG_STARVED: Duration = Duration::from_millis(500);
/// How long one late wake-up keeps the host counted as starved.
pub const LAG_MEMORY: Duration = Duration::from_secs(10);
/// CPU PSI `some avg10` (percent) from which the host is starved.
pub const CPU_SOME_STARVED: f64 = 80.0;
/// IO PSI `full avg10` (percent) from which the host is starved.
pub const IO_FULL_STARVED: f64 = 50.0;

/// What the host's load looks like now; see the module doc.
#[derive(Default)]
pub struct Pressure {
    /// When the event loop last woke [`LAG_STARVED`] or more late.
    last_lag: Mutex<Option<Instant>>,
}

impl Pressure {
    /// Spawns the loop-lag sampler (a task that sleeps [`LAG_TICK`] and measures how late it
    /// wakes) on the current runtime.
    pub fn spawn_sampler(self: &std::sync::Arc<Self>) {
        let me = self.clone();
        tokio::spawn(async move {
            let mut starved = false;
            loop {
                let before = Instant::now();
                tokio::time::sleep(LAG_TICK).await;
                let late = before.elapsed().saturating_sub(LAG_TICK);
                let now_starved = late >= LAG_STARVED;
                if now_starved {
                    me.note_lag(Instant::now());
                }
                if now_starved != starved {
                    info!(
                        late_ms = late.as_millis() as u64,
                        "event loop {}",
                        if now_starved {
                            "starved"
                        } else {
                            "on time again"
                        }
                    );
                    starved = now_starved;
                }
            }
        });
    }

    /// Records a late wake-up of the event loop at `at`.
    pub fn note_lag(&self, at: Instant) {
        if let Ok(mut l) = self.last_lag.lock() {
            *l = Some(at);
        }
    }

    /// Why the host counts as starved now, or None when it does not (see the module doc).
    pub fn starved(&self) -> Option<String> {
        let lagged = self
            .last_lag
            .lock()
            .ok()
            .and_then(|l| *l)
            .is_some_and(|at| at.elapsed() < LAG_MEMORY);
        let cpu = read_avg10("/proc/pressure/cpu", "some");
        let io = read_avg10("/proc/pressure/io", "full");
        verdict(lagged, cpu, io)
    }
}

/// The verdict from the three signals (`cpu` and `io` in percent, None without PSI).
fn verdict(lagged: bool, cpu: Option<f64>, io: Option<f64>) -> Option<String> {
    if lagged {
        return Some(format!(
            "the server's event loop ran {} ms late or more in the last {} s",
            LAG_STARVED.as_millis(),
            LAG_MEMORY.as_secs()
        ));
    }
    if let Some(cpu) = cpu.filter(|c| *c >= CPU_SOME_STARVED) {
        return Some(format!("CPU pressure some avg10 = {cpu:.0} %"));
    }
    if let Some(io) = io.filter(|i| *i >= IO_FULL_STARVED) {
        return Some(format!("IO pressure full avg10 = {io:.0} %"));
    }
    None
}

/// The `avg10` of line `kind` (`some` or `full`) of a PSI file, percent; None when the file
/// or the line is not there.
fn read_avg10(path: &str, kind: &str) -> Option<f64> {
    parse_avg10(&std::fs::read_to_string(path).ok()?, kind)
}

fn parse_avg10(text: &str, kind: &str) -> Option<f64> {
    let line = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some(kind))?;
    line.split_whitespace()
        .find_map(|f| f.strip_prefix("avg10="))?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PSI: &str = "some avg10=88.02 avg60=73.35 avg300=29.19 total=110408303\n\
                       full avg10=1.50 avg60=0.00 avg300=0.00 total=0\n";

    #[test]
    fn psi_lines_parse() {
        assert_eq!(parse_avg10(PSI, "some"), Some(88.02));
        assert_eq!(parse_avg10(PSI, "full"), Some(1.5));
        assert_eq!(parse_avg10("", "some"), None);
        assert_eq!(parse_avg10("some avg60=1.0\n", "some"), None);
    }

    #[test]
    fn each_signal_alone_starves_the_host() {
        assert!(verdict(false, None, None).is_none());
        assert!(verdict(false, Some(79.9), Some(49.9)).is_none());
        assert!(verdict(true, None, None).unwrap().contains("event loop"));
        assert!(verdict(false, Some(80.0), None).unwrap().contains("CPU"));
        assert!(verdict(false, Some(10.0), Some(50.0))
            .unwrap()
            .contains("IO"));
    }

    #[test]
    fn a_late_wake_up_is_remembered_for_a_while() {
        let p = Pressure::default();
        assert!(!p.last_lag.lock().unwrap().is_some());
        p.note_lag(Instant::now());
        let lagged = p
            .last_lag
            .lock()
            .unwrap()
            .is_some_and(|at| at.elapsed() < LAG_MEMORY);
        assert!(lagged);
        p.note_lag(Instant::now() - LAG_MEMORY - Duration::from_secs(1));
        let lagged = p
            .last_lag
            .lock()
            .unwrap()
            .is_some_and(|at| at.elapsed() < LAG_MEMORY);
        assert!(!lagged);
    }
}
