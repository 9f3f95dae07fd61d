//! Terse logging to stderr. The guest logs only rare events (start, channel trouble, bad
//! frames), never per request, so nothing a sandbox does can flood the host's log of it.

/// Writes one line `pandastack-guest: <message>` to stderr.
#[macro_export]
macro_rules! glog {
    ($($arg:tt)*) => {
        eprintln!("pandastack-guest: {}", format_args!($($arg)*))
    };
}
