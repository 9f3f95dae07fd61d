//! `pandastack-guest`: the first process of every sandbox. See the library docs.

fn main() {
    pandastack_guest::run();
}
