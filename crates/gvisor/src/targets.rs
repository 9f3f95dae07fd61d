//! Restore targets: containers made in advance (`runsc create` done, no process started), so a
//! restore only has to load the image (issue 11). `runsc restore` into a container that does not
//! exist yet first makes it (sandbox and gofer processes, cgroups, network setup); onto one
//! that exists it skips all that: ~85-100 ms instead of ~200-250 ms here (notes table).
//!
//! A target runs its shim in two stages (`shim.rs`): stage one is `runsc create`, which gives
//! the container its stdio (the guest channel's socket pair); stage two, sent over the target's
//! control socket when a restore takes it, is `runsc restore` onto it. A target belongs to one
//! [`TargetClass`] (rootfs, guest dir, resources, network mode), the things a checkpoint must
//! share with the container it is restored onto; its network slot carries the class's policy
//! until a restore under another policy replaces it.
//!
//! The stock of a class follows demand as the warm pool does: the largest number of restores
//! that asked for a target of it within any 5 s of the last 5 minutes, between
//! `--restore-targets` and `--restore-targets-max`. A fork tree of 8 thus finds 8 targets the
//! next time; [`Targets::trim`] gives the surplus back once the burst has aged out.

use pandastack_engine::demand::Bursts;
use pandastack_engine::TargetClass;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// One container made in advance.
#[derive(Debug, Clone)]
pub struct Target {
    pub instance_id: String,
    pub dir: PathBuf,
    pub class: TargetClass,
}

/// How many targets of one class to keep: between `least` and `most`, following the largest
/// burst of restores that asked for one lately (hits and misses; [`Bursts`]).
struct Goal {
    class: TargetClass,
    least: usize,
    most: usize,
    takes: Bursts,
}

impl Goal {
    fn now(&mut self) -> usize {
        self.takes.goal(Instant::now(), self.least, self.most)
    }
}

/// The stock of targets by class, and how many of each to keep.
#[derive(Default)]
pub struct Targets {
    /// What to keep, per class.
    goals: Mutex<Vec<Goal>>,
    /// Made targets (each knows its class).
    ready: Mutex<Vec<Target>>,
    /// A refill task is running.
    pub(crate) refilling: AtomicBool,
    /// Set at shutdown: no more targets are made.
    pub(crate) closed: AtomicBool,
    /// Targets being made, per class index (so a refill never overshoots).
    making: Mutex<HashMap<usize, usize>>,
}

impl Targets {
    /// Keeps between `least` and `most` targets of `class` (as recent restores ask; `most`
    /// below `least` counts as `least`); returns the targets no longer wanted (to be
    /// destroyed) when that went down.
    pub fn set_goal(&self, class: TargetClass, least: usize, most: usize) -> Vec<Target> {
        let mut goals = self.goals.lock().unwrap_or_else(|e| e.into_inner());
        match goals.iter_mut().find(|g| g.class == class) {
            Some(g) => (g.least, g.most) = (least, most),
            None => goals.push(Goal {
                class,
                least,
                most,
                takes: Bursts::default(),
            }),
        }
        Self::surplus(
            &mut goals,
            &mut self.ready.lock().unwrap_or_else(|e| e.into_inner()),
        )
    }

    /// Ready targets above what their class keeps now (a burst of restores has passed),
    /// removed from the stock, to be destroyed.
    pub fn trim(&self) -> Vec<Target> {
        let mut goals = self.goals.lock().unwrap_or_else(|e| e.into_inner());
        Self::surplus(
            &mut goals,
            &mut self.ready.lock().unwrap_or_else(|e| e.into_inner()),
        )
    }

    /// Removes and returns the ready targets beyond each class's goal now (and those of no
    /// class kept any more).
    fn surplus(goals: &mut [Goal], ready: &mut Vec<Target>) -> Vec<Target> {
        let keep: Vec<(TargetClass, usize)> = goals
            .iter_mut()
            .map(|g| (g.class.clone(), g.now()))
            .collect();
        let mut have: HashMap<usize, usize> = HashMap::new();
        let mut extra = Vec::new();
        ready.retain(|t| {
            let Some(i) = keep.iter().position(|(c, _)| *c == t.class) else {
                extra.push(t.clone());
                return false;
            };
            let n = have.entry(i).or_default();
            *n += 1;
            if *n > keep[i].1 {
                extra.push(t.clone());
                false
            } else {
                true
            }
        });
        extra
    }

    /// Takes a ready target that fits `want`, and counts the ask (hit or miss) as demand for
    /// the kept class it fits.
    pub fn take(&self, want: &TargetClass) -> Option<Target> {
        if let Some(g) = self
            .goals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter_mut()
            .find(|g| g.class.fits(want))
        {
            g.takes.record(Instant::now());
        }
        let mut ready = self.ready.lock().unwrap_or_else(|e| e.into_inner());
        let i = ready.iter().position(|t| t.class.fits(want))?;
        Some(ready.swap_remove(i))
    }

    /// Ready targets that fit `want`.
    pub fn ready_fitting(&self, want: &TargetClass) -> usize {
        let ready = self.ready.lock().unwrap_or_else(|e| e.into_inner());
        ready.iter().filter(|t| t.class.fits(want)).count()
    }

    /// Adds a made target.
    pub fn add(&self, t: Target) {
        self.ready.lock().unwrap_or_else(|e| e.into_inner()).push(t);
    }

    /// The next class short of its goal (counting targets being made), marking one as being
    /// made; `None` when every goal is met.
    pub fn next_to_make(&self) -> Option<(usize, TargetClass)> {
        if self.closed.load(Ordering::SeqCst) {
            return None;
        }
        let mut goals = self.goals.lock().unwrap_or_else(|e| e.into_inner());
        let ready = self.ready.lock().unwrap_or_else(|e| e.into_inner());
        let mut making = self.making.lock().unwrap_or_else(|e| e.into_inner());
        for (i, g) in goals.iter_mut().enumerate() {
            let have = ready.iter().filter(|t| t.class == g.class).count()
                + making.get(&i).copied().unwrap_or(0);
            if have < g.now() {
                *making.entry(i).or_default() += 1;
                return Some((i, g.class.clone()));
            }
        }
        None
    }

    /// A target of class index `i` is made (or failed).
    pub fn made(&self, i: usize) {
        let mut making = self.making.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = making.get_mut(&i) {
            *n = n.saturating_sub(1);
        }
    }

    /// Targets ready plus being made.
    pub fn held(&self) -> usize {
        let ready = self.ready.lock().unwrap_or_else(|e| e.into_inner()).len();
        let making: usize = self
            .making
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .sum();
        ready + making
    }

    /// Targets ready to take a restore.
    pub fn ready(&self) -> usize {
        self.ready.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Every ready target, removed from the stock (at shutdown).
    pub fn drain(&self) -> Vec<Target> {
        self.closed.store(true, Ordering::SeqCst);
        std::mem::take(&mut *self.ready.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(cpu: u32) -> TargetClass {
        TargetClass {
            rootfs: "/r".into(),
            guest_dir: "/g".into(),
            cpu,
            memory_mb: 512,
            network: None,
            disk_mb: Some(1024),
        }
    }

    fn target(n: u32, c: &TargetClass) -> Target {
        Target {
            instance_id: format!("ps-{n}"),
            dir: format!("/i/{n}").into(),
            class: c.clone(),
        }
    }

    #[test]
    fn goals_are_met_without_overshoot_and_lowered_goals_give_targets_back() {
        let t = Targets::default();
        let a = class(1);
        assert!(t.set_goal(a.clone(), 2, 2).is_empty());
        let (i, c) = t.next_to_make().unwrap();
        assert_eq!(c, a);
        let (j, _) = t.next_to_make().unwrap();
        assert!(t.next_to_make().is_none(), "two are being made already");
        t.add(target(1, &a));
        t.made(i);
        t.add(target(2, &a));
        t.made(j);
        assert!(t.next_to_make().is_none());
        assert!(t.take(&class(2)).is_none(), "other resources do not fit");
        assert_eq!((t.ready_fitting(&a), t.ready_fitting(&class(2))), (2, 0));
        assert_eq!(t.take(&a).unwrap().class, a);
        assert!(t.next_to_make().is_some(), "one was taken");
        let extra = t.set_goal(a.clone(), 0, 0);
        assert_eq!(extra.len(), 1);
        assert!(t.take(&a).is_none());
        t.drain();
        assert!(t.next_to_make().is_none(), "closed");
    }

    #[test]
    fn a_burst_of_takes_raises_the_goal_up_to_the_most() {
        let t = Targets::default();
        let a = class(1);
        t.set_goal(a.clone(), 1, 4);
        let mut making = Vec::new();
        while let Some((i, _)) = t.next_to_make() {
            making.push(i);
        }
        assert_eq!(making.len(), 1, "no demand yet: the least");
        t.made(making[0]);
        for _ in 0..6 {
            assert!(t.take(&a).is_none(), "none ready: a miss still counts");
        }
        let mut more = 0;
        while let Some((i, c)) = t.next_to_make() {
            t.made(i);
            t.add(Target {
                instance_id: format!("ps-{more}"),
                dir: "/i".into(),
                class: c,
            });
            more += 1;
        }
        assert_eq!(more, 4, "six asks within the window, capped at the most");
        assert!(t.trim().is_empty(), "the burst is recent");
        let extra = t.set_goal(a.clone(), 1, 2);
        assert_eq!(
            (extra.len(), t.ready_fitting(&a)),
            (2, 2),
            "a lower most gives targets back"
        );
        let extra = t.set_goal(class(2), 1, 1);
        assert!(
            extra.is_empty(),
            "another class's goal leaves this one's stock"
        );
        assert_eq!(t.ready_fitting(&a), 2);
    }
}
