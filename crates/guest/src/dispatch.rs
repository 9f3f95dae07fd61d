//! Routes each request to its handler. Quick requests are answered on the reader thread;
//! anything that can take long (exec, file read, listing, removal, kernel start and run) gets a
//! thread of its own so one slow request never holds up the others. Upload chunks are written
//! synchronously here: that is what makes a 1 GiB upload flow at disk speed without buffering.

use crate::channel::Out;
use crate::error::OpError;
use crate::exec::Execs;
use crate::files::{self, ReadWindows, Uploads};
use crate::kernel::Kernels;
use crate::memory::MemoryGuard;
use crate::reaper::Reaper;
use crate::setup::Config;
use pandastack_guest_protocol::{ErrorCode, Frame, GuestMsg, HostMsg, RequestId, PROTOCOL_VERSION};
use std::sync::Arc;

/// Everything a request handler may need, cheap to clone into worker threads.
#[derive(Clone)]
pub struct Ctx {
    pub out: Arc<Out>,
    pub reaper: Arc<Reaper>,
    pub config: Arc<Config>,
    pub execs: Arc<Execs>,
    pub kernels: Arc<Kernels>,
    /// Flow-controlled file reads in progress.
    pub reads: Arc<ReadWindows>,
    /// The memory guard's kills (its thread runs only in a sandbox: [`Guest::guard_memory`]).
    pub memory: Arc<MemoryGuard>,
}

/// The guest state owned by the reader thread.
pub struct Guest {
    ctx: Ctx,
    uploads: Uploads,
}

impl Guest {
    /// A guest writing replies to fd 1.
    pub fn new(config: Config) -> Guest {
        Self::with_out(config, Out::stdout())
    }

    /// A guest writing replies to `out`.
    pub fn with_out(config: Config, out: Arc<Out>) -> Guest {
        let ctx = Ctx {
            out,
            reaper: Reaper::start(),
            config: Arc::new(config),
            execs: Arc::new(Execs::default()),
            kernels: Arc::new(Kernels::default()),
            reads: Arc::new(ReadWindows::default()),
            memory: Arc::new(MemoryGuard::default()),
        };
        Guest {
            ctx,
            uploads: Uploads::default(),
        }
    }

    /// Starts the memory guard ([`crate::memory`]): only in a sandbox, as PID 1.
    pub fn guard_memory(&self) {
        self.ctx.memory.start();
    }

    /// Decodes and handles one frame. A frame that is not a request gets `Error{Invalid}` when
    /// its id can be read, else it is logged and skipped.
    pub fn handle_frame(&mut self, frame: Frame) {
        match frame.decode::<HostMsg>() {
            Ok(msg) => self.handle(msg, frame.body),
            Err(e) => match peek_id(&frame.header) {
                Some(id) => {
                    self.ctx
                        .out
                        .error(id, ErrorCode::Invalid, &format!("bad request: {e}"))
                }
                None => glog!("skipping undecodable frame: {e}"),
            },
        }
    }

    fn handle(&mut self, msg: HostMsg, body: Vec<u8>) {
        let ctx = &self.ctx;
        let id = msg.id();
        let result: Result<(), OpError> = match msg {
            HostMsg::Hello { version, .. } => {
                hello(ctx, id, version);
                Ok(())
            }
            HostMsg::Ping {
                memory_lease_ms, ..
            } => {
                if let Some(ms) = memory_lease_ms {
                    ctx.memory.lease(ms);
                }
                ctx.out.send(&GuestMsg::Pong {
                    id,
                    oom_kills: ctx.memory.take_unreported(),
                });
                Ok(())
            }
            HostMsg::Exec {
                cmd,
                env,
                cwd,
                timeout_ms,
                ..
            } => crate::exec::start(
                ctx,
                id,
                crate::exec::Request {
                    cmd,
                    env,
                    cwd,
                    timeout_ms,
                },
            ),
            HostMsg::ExecStdin { .. } => Err(OpError::invalid("stdin is not supported")),
            HostMsg::ExecKill { .. } => {
                crate::exec::kill(ctx, id);
                Ok(())
            }
            HostMsg::FileRead { path, window, .. } => {
                background(ctx, id, move |c| files::read(c, id, &path, window))
            }
            HostMsg::FileReadAck { .. } => {
                ctx.reads.ack(id);
                Ok(())
            }
            HostMsg::FileWrite { path, .. } => self.uploads.begin(id, &path),
            HostMsg::FileChunk { .. } => self.uploads.chunk(id, &body),
            HostMsg::FileEnd { .. } => self.uploads.end(&ctx.out, id),
            HostMsg::FileAbort { .. } => {
                if ctx.reads.abort(id) {
                    Ok(())
                } else {
                    self.uploads.abort(&ctx.out, id)
                }
            }
            HostMsg::ListDir { path, .. } => background(ctx, id, move |c| {
                let entries = files::list(&path)?;
                c.out.send(&GuestMsg::DirList { id, entries });
                Ok(())
            }),
            HostMsg::Stat { path, .. } => files::stat(&path).map(|entry| {
                ctx.out.send(&GuestMsg::Stat { id, entry });
            }),
            HostMsg::Remove { path, .. } => background(ctx, id, move |c| {
                files::remove(&path)?;
                c.out.send(&GuestMsg::Done { id });
                Ok(())
            }),
            HostMsg::MakeDir { path, .. } => files::make_dir(&path).map(|()| {
                ctx.out.send(&GuestMsg::Done { id });
            }),
            HostMsg::KernelStart {
                kernel_id,
                language,
                env,
                ..
            } => background(ctx, id, move |c| {
                crate::kernel::start(c, id, &kernel_id, &language, env)
            }),
            HostMsg::KernelRun {
                kernel_id,
                code,
                timeout_ms,
                ..
            } => crate::kernel::run(ctx, id, &kernel_id, code, timeout_ms),
            HostMsg::KernelStop { kernel_id, .. } => {
                crate::kernel::stop(ctx, &kernel_id).map(|()| {
                    ctx.out.send(&GuestMsg::Done { id });
                })
            }
            HostMsg::KernelList { .. } => {
                ctx.out.send(&GuestMsg::Kernels {
                    id,
                    kernels: ctx.kernels.list(),
                });
                Ok(())
            }
        };
        if let Err(e) = result {
            ctx.out.error(id, e.code, &e.message);
        }
    }
}

fn hello(ctx: &Ctx, id: RequestId, version: u32) {
    if version == PROTOCOL_VERSION {
        let guest_version = env!("CARGO_PKG_VERSION").to_string();
        ctx.out.send(&GuestMsg::HelloOk {
            id,
            version: PROTOCOL_VERSION,
            guest_version,
            features: vec![pandastack_guest_protocol::FEATURE_READ_WINDOW.to_string()],
        });
    } else {
        let message =
            format!("protocol version {version} not supported (guest speaks {PROTOCOL_VERSION})");
        ctx.out.error(id, ErrorCode::Version, &message);
    }
}

/// Runs `job` on a new thread; its error becomes the reply for `id`.
fn background<F>(ctx: &Ctx, id: RequestId, job: F) -> Result<(), OpError>
where
    F: FnOnce(&Ctx) -> Result<(), OpError> + Send + 'static,
{
    let c = ctx.clone();
    std::thread::Builder::new()
        .spawn(move || {
            if let Err(e) = job(&c) {
                c.out.error(id, e.code, &e.message);
            }
        })
        .map(|_| ())
        .map_err(|e| OpError::new(ErrorCode::Io, format!("cannot start thread: {e}")))
}

/// The `id` field of a header that did not decode as a request, if it has one.
fn peek_id(header: &[u8]) -> Option<RequestId> {
    serde_json::from_slice::<serde_json::Value>(header)
        .ok()?
        .get("id")?
        .as_u64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peeks_id_of_bad_request() {
        assert_eq!(peek_id(br#"{"type":"nope","id":9}"#), Some(9));
        assert_eq!(peek_id(b"garbage"), None);
    }
}
