//! `KernelRun`: queue a cell on its kernel's worker.

use crate::dispatch::Ctx;
use crate::error::OpError;
use pandastack_guest_protocol::{ErrorCode, RequestId};

use super::{lock, Job};

/// Queues `code` on kernel `kernel_id`; the worker replies `KernelResult` for `id`.
///
/// # Errors
/// `NotFound` for an unknown kernel, `Kernel` for one that was stopped.
pub fn run(
    ctx: &Ctx,
    id: RequestId,
    kernel_id: &str,
    code: String,
    timeout_ms: Option<u64>,
) -> Result<(), OpError> {
    let kernel = ctx.kernels.get(kernel_id).ok_or_else(|| {
        OpError::new(ErrorCode::NotFound, format!("kernel {kernel_id} not found"))
    })?;
    let jobs = lock(&kernel.jobs);
    let queued = match jobs.as_ref() {
        Some(tx) => tx
            .send(Job {
                id,
                code,
                timeout_ms,
            })
            .is_ok(),
        None => false,
    };
    if queued {
        Ok(())
    } else {
        Err(OpError::kernel(kernel.dead().unwrap_or_else(|| {
            format!("kernel {kernel_id} is not running")
        })))
    }
}
