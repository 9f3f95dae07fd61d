//! `KernelStop`: kill a kernel's process group and forget it. Runs still queued answer
//! `Error{Kernel}`.

use super::lock;
use crate::dispatch::Ctx;
use crate::error::OpError;
use crate::exec::kill_group;
use pandastack_guest_protocol::ErrorCode;

/// Stops kernel `kernel_id`.
///
/// # Errors
/// `NotFound` for an unknown kernel.
pub fn stop(ctx: &Ctx, kernel_id: &str) -> Result<(), OpError> {
    let kernel = ctx.kernels.remove(kernel_id).ok_or_else(|| {
        OpError::new(ErrorCode::NotFound, format!("kernel {kernel_id} not found"))
    })?;
    kernel.mark_dead(format!("kernel {kernel_id} was stopped"));
    lock(&kernel.jobs).take();
    kill_group(kernel.pid as i32);
    Ok(())
}
