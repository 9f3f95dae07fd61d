//! The process limit of what the guest starts (issue 8 point 3: a fork bomb leaves the
//! sandbox usable).
//!
//! The engine starts the guest with `RLIMIT_NPROC` = the sandbox's user limit +
//! [`GUEST_PROCESS_RESERVE`]; every command and kernel the guest starts gets the user limit
//! (`setrlimit` in the child, before `execve`). gVisor counts processes per uid (everything
//! here is root), so a fork loop stops at the user limit while the guest keeps the reserve for
//! the threads and processes of new requests.

use pandastack_guest_protocol::GUEST_PROCESS_RESERVE;
use std::sync::OnceLock;

/// The `RLIMIT_NPROC` for the guest's children: its own minus [`GUEST_PROCESS_RESERVE`]. None
/// when its own limit is unlimited or not above the reserve (outside a sandbox, or an engine
/// that sets no reserve): children then inherit the guest's limit unchanged. Read once.
pub fn child_process_limit() -> Option<libc::rlimit> {
    static LIMIT: OnceLock<Option<libc::rlimit>> = OnceLock::new();
    *LIMIT.get_or_init(|| {
        let mut own = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes one rlimit into `own`, a valid out-pointer.
        if unsafe { libc::getrlimit(libc::RLIMIT_NPROC, &mut own) } != 0 {
            return None;
        }
        child_limit(own)
    })
}

/// The rule of [`child_process_limit`] for an own limit of `own`.
fn child_limit(own: libc::rlimit) -> Option<libc::rlimit> {
    if own.rlim_cur == libc::RLIM_INFINITY || own.rlim_cur <= GUEST_PROCESS_RESERVE {
        return None;
    }
    let cur = own.rlim_cur - GUEST_PROCESS_RESERVE;
    Some(libc::rlimit {
        rlim_cur: cur,
        rlim_max: cur,
    })
}

/// Applies `limit` to the calling process: for a child between fork and exec (one system
/// call, async-signal-safe, no allocation). Lowering a limit cannot fail for lack of privilege.
pub fn apply(limit: &libc::rlimit) {
    // SAFETY: setrlimit reads one rlimit from a valid reference and touches no other memory.
    unsafe {
        libc::setrlimit(libc::RLIMIT_NPROC, limit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lim(n: u64) -> libc::rlimit {
        libc::rlimit {
            rlim_cur: n,
            rlim_max: n,
        }
    }

    #[test]
    fn children_get_the_limit_without_the_guests_reserve() {
        let child = child_limit(lim(128 + GUEST_PROCESS_RESERVE)).expect("a limit");
        assert_eq!((child.rlim_cur, child.rlim_max), (128, 128));
        assert!(child_limit(lim(libc::RLIM_INFINITY)).is_none());
        assert!(child_limit(lim(GUEST_PROCESS_RESERVE)).is_none());
    }
}
