//! The build queue (issue 23 finding 6): fair across workspaces, bounded per workspace, and
//! a newer build of a template replaces its queued older one.
//!
//! Each workspace has its own FIFO of queued jobs. A worker takes the next job of the
//! workspace whose last build started longest ago (a workspace that never built comes first),
//! so one workspace's pile of builds cannot hold the workers: with one worker, another
//! workspace's build waits for at most the build that is running. Within a workspace, builds
//! run in the order they were submitted. Jobs that are running are no longer in the queue.

use super::job::Job;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use tokio::sync::Notify;

/// Why a job was not queued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueError {
    /// The workspace already has this many queued builds (the `--max-queued-builds` cap).
    Full { queued: usize },
}

/// Queued jobs per workspace, and when each workspace last had a build started.
#[derive(Default)]
struct State {
    /// Workspace -> its queued jobs, each with its push sequence number.
    jobs: HashMap<String, VecDeque<(u64, Job)>>,
    /// Workspace -> sequence number of its latest started build (higher is later).
    last_started: HashMap<String, u64>,
    started: u64,
    pushed: u64,
}

/// The queue the build workers take jobs from. Owned by [`super::Builds`].
#[derive(Default)]
pub struct BuildQueue {
    state: Mutex<State>,
    wake: Notify,
}

impl BuildQueue {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `job` at the end of its workspace's FIFO. Queued jobs of the same workspace and
    /// template name are taken out and returned (the new one supersedes them); then the
    /// workspace may hold at most `max_queued` queued jobs.
    ///
    /// # Errors
    /// [`QueueError::Full`] when the workspace already has `max_queued` queued jobs of other
    /// names (nothing is changed then).
    pub fn push(&self, job: Job, max_queued: usize) -> Result<Vec<Job>, QueueError> {
        let mut st = self.state();
        st.pushed += 1;
        let seq = st.pushed;
        let fifo = st.jobs.entry(job.workspace_id.clone()).or_default();
        let others = fifo.iter().filter(|(_, j)| j.name != job.name).count();
        if others >= max_queued {
            return Err(QueueError::Full { queued: fifo.len() });
        }
        let (superseded, kept): (Vec<_>, Vec<_>) =
            fifo.drain(..).partition(|(_, j)| j.name == job.name);
        fifo.extend(kept);
        fifo.push_back((seq, job));
        drop(st);
        let superseded = superseded.into_iter().map(|(_, j)| j).collect();
        self.wake.notify_one();
        Ok(superseded)
    }

    /// Whether a build of template `name` of `workspace_id` would be queued now: queued
    /// builds of the same name do not count (the new one replaces them).
    ///
    /// # Errors
    /// [`QueueError::Full`] as [`BuildQueue::push`] would answer.
    pub fn check(
        &self,
        workspace_id: &str,
        name: &str,
        max_queued: usize,
    ) -> Result<(), QueueError> {
        let st = self.state();
        let Some(fifo) = st.jobs.get(workspace_id) else {
            return Ok(());
        };
        let others = fifo.iter().filter(|(_, j)| j.name != name).count();
        if others >= max_queued {
            return Err(QueueError::Full { queued: fifo.len() });
        }
        Ok(())
    }

    /// Builds `workspace_id` has queued (not running).
    pub fn queued(&self, workspace_id: &str) -> usize {
        self.state().jobs.get(workspace_id).map_or(0, VecDeque::len)
    }

    /// The next job: the oldest of the workspace served least recently. Waits while the
    /// queue is empty.
    pub async fn pop(&self) -> Job {
        loop {
            if let Some(job) = self.try_pop() {
                return job;
            }
            // `notify_one` leaves a permit when no worker waits, so a push between
            // `try_pop` and here is not missed.
            self.wake.notified().await;
        }
    }

    fn try_pop(&self) -> Option<Job> {
        let mut st = self.state();
        // Least recently served first; between equals, the one whose next job is oldest.
        let workspace = st
            .jobs
            .iter()
            .filter_map(|(ws, fifo)| fifo.front().map(|(seq, _)| (ws, *seq)))
            .min_by_key(|(ws, seq)| (st.last_started.get(*ws).copied().unwrap_or(0), *seq))
            .map(|(ws, _)| ws.clone())?;
        let fifo = st.jobs.get_mut(&workspace)?;
        let (_, job) = fifo.pop_front()?;
        if fifo.is_empty() {
            st.jobs.remove(&workspace);
        }
        st.started += 1;
        let seq = st.started;
        st.last_started.insert(workspace, seq);
        Some(job)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builds::job::JobSource;
    use pandastack_templates::Resources;

    fn job(ws: &str, name: &str, n: u32) -> Job {
        Job {
            id: format!("{ws}-{name}-{n}"),
            workspace_id: ws.into(),
            name: name.into(),
            resources: Resources {
                cpu: 1,
                memory_mb: 512,
                disk_mb: 1024,
            },
            source: JobSource::RootfsTar {
                path: "/nonexistent".into(),
                sha256: String::new(),
            },
        }
    }

    #[tokio::test]
    async fn workspaces_take_turns_and_keep_their_order() {
        let q = BuildQueue::default();
        for n in 0..4 {
            q.push(job("b", &format!("t{n}"), n), 5).unwrap();
        }
        assert_eq!(q.pop().await.id, "b-t0-0");
        q.push(job("a", "x", 0), 5).unwrap();
        // b just had a build started; a never did.
        assert_eq!(q.pop().await.id, "a-x-0");
        assert_eq!(q.pop().await.id, "b-t1-1");
        q.push(job("a", "y", 1), 5).unwrap();
        assert_eq!(q.pop().await.id, "a-y-1");
        assert_eq!(q.pop().await.id, "b-t2-2");
        assert_eq!(q.pop().await.id, "b-t3-3");
        assert_eq!(q.queued("b"), 0);
    }

    #[test]
    fn capped_per_workspace_and_a_newer_build_replaces_the_queued_one() {
        let q = BuildQueue::default();
        q.push(job("a", "t", 0), 2).unwrap();
        q.push(job("a", "u", 1), 2).unwrap();
        assert!(matches!(
            q.push(job("a", "v", 2), 2),
            Err(QueueError::Full { queued: 2 })
        ));
        // Another workspace has its own cap.
        q.push(job("b", "v", 0), 2).unwrap();
        // Same name: replaces, even at the cap.
        let gone = q.push(job("a", "t", 3), 2).unwrap();
        assert_eq!(
            gone.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(),
            ["a-t-0"]
        );
        assert_eq!(q.queued("a"), 2);
        let order: Vec<String> = (0..2).filter_map(|_| q.try_pop()).map(|j| j.id).collect();
        assert_eq!(order, ["a-u-1", "b-v-0"]);
        assert_eq!(q.try_pop().map(|j| j.id).as_deref(), Some("a-t-3"));
    }
}
