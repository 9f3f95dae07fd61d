//! [`GuestConn`]: a connection to one instance's guest daemon through its shim socket.
//!
//! A writer task owns the socket's write half and sends queued frames in order; a reader task
//! decodes frames and routes each to the request that owns its id. Replies to ids nobody waits
//! for (a request of a previous server process, a cancelled stream) are dropped. The reader
//! never waits on a consumer: each request has its own queue, bounded by bytes
//! ([`MAX_QUEUED_BYTES`]), so a slow consumer (an HTTP client reading a download or an exec
//! stream slowly) holds up only its own request and never the connection that snapshots,
//! probes and other requests use (issue 8). Downloads are paced at the source instead: the
//! guest sends a bounded window of chunks ahead and waits for acknowledgements
//! ([`FEATURE_READ_WINDOW`]). A consumer that lets its queue pass the bound loses its request.

use super::throttle::{clip, Throttle};
use pandastack_guest_protocol::{
    Frame, FrameError, GuestMsg, HostMsg, RequestId, FEATURE_READ_WINDOW, MAX_BODY_BYTES,
    MAX_HEADER_BYTES, PROTOCOL_VERSION,
};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::mpsc;
use tracing::{debug, warn};

/// Reply bytes one request may have waiting for its consumer (32 MiB) before it is dropped.
pub const MAX_QUEUED_BYTES: usize = 32 * 1024 * 1024;
/// File chunks (1 MiB each) a guest may send ahead of the host's acknowledgements.
pub const READ_WINDOW: u32 = 8;
/// How long a missing or refusing shim socket is retried before the instance counts as gone.
const SOCKET_GONE_GRACE: Duration = Duration::from_millis(250);
/// Frames queued for the socket (uploads send 1 MiB chunks: this bounds their buffering).
const WRITE_BUFFER: usize = 16;
/// What a reply's header costs in the byte budget beyond its body (a rough frame header size).
const REPLY_OVERHEAD: usize = 256;

/// A reply frame: the decoded message and its raw body.
pub type Reply = (GuestMsg, Vec<u8>);

/// Errors talking to a guest.
#[derive(Debug, thiserror::Error)]
pub enum GuestError {
    /// The channel is down (the sandbox is stopping, or its shim is gone). The message carries
    /// "connection refused" so the SDKs' warm-up retry applies (contract §1.4).
    #[error("guest channel: connect: connection refused ({0})")]
    Unavailable(String),
    /// The guest speaks another protocol version.
    #[error("guest speaks protocol {0}, host speaks {PROTOCOL_VERSION}")]
    Version(String),
    #[error("guest channel: {0}")]
    Frame(#[from] FrameError),
}

/// Where the reader puts a request's replies, and how many bytes wait there.
struct Slot {
    tx: mpsc::UnboundedSender<Reply>,
    queued: Arc<AtomicUsize>,
}

type Pending = Arc<Mutex<HashMap<RequestId, Slot>>>;

/// The replies of one request, in order.
pub struct Replies {
    rx: mpsc::UnboundedReceiver<Reply>,
    queued: Arc<AtomicUsize>,
}

impl Replies {
    /// The next reply; None once the request is finished or dropped, or the channel closed.
    pub async fn recv(&mut self) -> Option<Reply> {
        let reply = self.rx.recv().await?;
        self.queued.fetch_sub(cost(&reply), Ordering::SeqCst);
        Some(reply)
    }

    /// A reply that has already arrived, if any.
    pub fn try_recv(&mut self) -> Option<Reply> {
        let reply = self.rx.try_recv().ok()?;
        self.queued.fetch_sub(cost(&reply), Ordering::SeqCst);
        Some(reply)
    }
}

fn cost(reply: &Reply) -> usize {
    reply.1.len() + REPLY_OVERHEAD
}

/// A live connection. Cloning shares it.
#[derive(Clone)]
pub struct GuestConn {
    tx: mpsc::Sender<Frame>,
    pending: Pending,
    next_id: Arc<AtomicU64>,
    alive: Arc<AtomicBool>,
    /// What the guest's `HelloOk` listed.
    features: Arc<OnceLock<Vec<String>>>,
}

impl GuestConn {
    /// Connects to the shim socket at `path` and performs the version handshake.
    ///
    /// # Errors
    /// [`GuestError::Unavailable`] when the socket does not answer within `timeout`,
    /// [`GuestError::Version`] on a version mismatch.
    pub async fn connect(path: &Path, timeout: Duration) -> Result<Self, GuestError> {
        let deadline = tokio::time::Instant::now() + timeout;
        // A missing or refusing socket means the shim is gone (it removes the socket when runsc
        // exits): give up after a moment instead of the whole timeout. The moment covers the
        // gap between the shim's bind and listen right after a boot.
        let mut gone_since: Option<tokio::time::Instant> = None;
        loop {
            match Self::try_connect(path).await {
                Ok(conn) => match tokio::time::timeout_at(deadline, conn.hello()).await {
                    Ok(Ok(())) => return Ok(conn),
                    Ok(Err(GuestError::Version(v))) => return Err(GuestError::Version(v)),
                    Ok(Err(e)) => {
                        if tokio::time::Instant::now() >= deadline {
                            return Err(e);
                        }
                    }
                    Err(_) => return Err(GuestError::Unavailable("handshake timed out".into())),
                },
                Err(e) => {
                    let now = tokio::time::Instant::now();
                    let gone = matches!(
                        e.kind(),
                        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
                    );
                    let since = *gone_since.get_or_insert(now);
                    if now >= deadline || (gone && now - since >= SOCKET_GONE_GRACE) {
                        return Err(GuestError::Unavailable(e.to_string()));
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
    }

    async fn try_connect(path: &Path) -> std::io::Result<Self> {
        let stream = UnixStream::connect(path).await?;
        let (mut rd, mut wr) = stream.into_split();
        let (tx, mut rx) = mpsc::channel::<Frame>(WRITE_BUFFER);
        let pending: Pending = Arc::default();
        let alive = Arc::new(AtomicBool::new(true));
        let a = alive.clone();
        tokio::spawn(async move {
            while let Some(f) = rx.recv().await {
                let r = async {
                    wr.write_all(&f.prefix()).await?;
                    wr.write_all(&f.header).await?;
                    wr.write_all(&f.body).await
                }
                .await;
                if r.is_err() {
                    a.store(false, Ordering::SeqCst);
                    break;
                }
            }
        });
        let p = pending.clone();
        let a = alive.clone();
        tokio::spawn(async move {
            if let Err(e) = read_loop(&mut rd, &p).await {
                debug!(error = %e, "guest channel closed");
            }
            a.store(false, Ordering::SeqCst);
            // Dropping the senders ends every waiting request with "channel closed".
            p.lock().unwrap_or_else(|e| e.into_inner()).clear();
        });
        // Ids start from the clock so that replies still addressed to a previous server
        // process's requests can never match a new request.
        let base = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(1);
        Ok(GuestConn {
            tx,
            pending,
            next_id: Arc::new(AtomicU64::new(base)),
            alive,
            features: Arc::default(),
        })
    }

    async fn hello(&self) -> Result<(), GuestError> {
        let id = self.new_id();
        match self
            .call(HostMsg::Hello {
                id,
                version: PROTOCOL_VERSION,
            })
            .await?
        {
            (GuestMsg::HelloOk { features, .. }, _) => {
                let _ = self.features.set(features);
                Ok(())
            }
            (GuestMsg::Error { message, .. }, _) => Err(GuestError::Version(message)),
            (other, _) => Err(GuestError::Version(format!("unexpected reply {other:?}"))),
        }
    }

    /// The window to ask for in a `FileRead`: [`READ_WINDOW`] when the guest paces reads by
    /// acknowledgement, None for an older guest (its frames then simply queue).
    pub fn read_window(&self) -> Option<u32> {
        self.features
            .get()
            .is_some_and(|f| f.iter().any(|x| x == FEATURE_READ_WINDOW))
            .then_some(READ_WINDOW)
    }

    /// True until the socket fails.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// A fresh request id.
    pub fn new_id(&self) -> RequestId {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Sends `msg` (with `body`) and returns the stream of replies for its id.
    ///
    /// # Errors
    /// [`GuestError::Unavailable`] when the channel is down.
    pub async fn request(&self, msg: HostMsg, body: Vec<u8>) -> Result<Replies, GuestError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let id = msg.id();
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                id,
                Slot {
                    tx,
                    queued: queued.clone(),
                },
            );
        if let Err(e) = self.send(msg, body).await {
            self.forget(id);
            return Err(e);
        }
        Ok(Replies { rx, queued })
    }

    /// Sends a frame that expects no reply of its own (a file chunk, a kill).
    ///
    /// # Errors
    /// [`GuestError::Unavailable`] when the channel is down.
    pub async fn send(&self, msg: HostMsg, body: Vec<u8>) -> Result<(), GuestError> {
        if !self.is_alive() {
            return Err(GuestError::Unavailable("channel closed".into()));
        }
        let frame = Frame::new(&msg, body)?;
        self.tx
            .send(frame)
            .await
            .map_err(|_| GuestError::Unavailable("channel closed".into()))
    }

    /// Sends `msg` and waits for its single final reply.
    ///
    /// # Errors
    /// [`GuestError::Unavailable`] when the channel closes first.
    pub async fn call(&self, msg: HostMsg) -> Result<Reply, GuestError> {
        let id = msg.id();
        let mut rx = self.request(msg, Vec::new()).await?;
        while let Some(reply) = rx.recv().await {
            if reply.0.is_final() {
                self.forget(id);
                return Ok(reply);
            }
        }
        Err(GuestError::Unavailable("channel closed".into()))
    }

    /// Stops routing replies for `id` (a finished or abandoned request).
    pub fn forget(&self, id: RequestId) {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }
}

async fn read_loop(
    rd: &mut tokio::net::unix::OwnedReadHalf,
    pending: &Pending,
) -> Result<(), GuestError> {
    loop {
        let mut prefix = [0u8; 8];
        if let Err(e) = rd.read_exact(&mut prefix).await {
            return Err(GuestError::Frame(FrameError::Io(e)));
        }
        let (hlen, blen) = Frame::parse_prefix(&prefix)?;
        debug_assert!(hlen <= MAX_HEADER_BYTES && blen <= MAX_BODY_BYTES);
        let mut header = vec![0u8; hlen as usize];
        rd.read_exact(&mut header).await.map_err(FrameError::Io)?;
        let mut body = vec![0u8; blen as usize];
        rd.read_exact(&mut body).await.map_err(FrameError::Io)?;
        let msg: GuestMsg = match serde_json::from_slice(&header) {
            Ok(m) => m,
            Err(e) => {
                static UNDECODABLE: Throttle = Throttle::new();
                if let Some(left_out) = UNDECODABLE.allow(std::time::Instant::now()) {
                    let error = e.to_string();
                    warn!(
                        error = clip(&error),
                        left_out, "undecodable guest frame skipped"
                    );
                }
                continue;
            }
        };
        let id = msg.id();
        let is_final = msg.is_final();
        let mut map = pending.lock().unwrap_or_else(|e| e.into_inner());
        let Some(slot) = map.get(&id) else { continue };
        let reply = (msg, body);
        let c = cost(&reply);
        let over = slot.queued.load(Ordering::SeqCst) + c > MAX_QUEUED_BYTES;
        if over {
            static TOO_SLOW: Throttle = Throttle::new();
            if let Some(left_out) = TOO_SLOW.allow(std::time::Instant::now()) {
                warn!(
                    request_id = id,
                    left_out,
                    "guest reply consumer too slow ({MAX_QUEUED_BYTES} bytes queued); request dropped"
                );
            }
            map.remove(&id);
            continue;
        }
        slot.queued.fetch_add(c, Ordering::SeqCst);
        if slot.tx.send(reply).is_err() || is_final {
            map.remove(&id);
        }
    }
}
