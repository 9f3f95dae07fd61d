//! The TCP front end of the databases: the server listens on each database's port (on
//! loopback, and on the address sandboxes reach the host at) and splices every admitted
//! connection to the cluster's unix socket.
//!
//! Admission comes first ([`Admission::admit`]): the server maps the peer's address to a
//! sandbox and its workspace and refuses strangers before PostgreSQL sees a byte (issue 10);
//! it also starts a stopped cluster (wake on connect) and counts the connection for the idle
//! stop. A refused client gets a PostgreSQL `ErrorResponse` (after answering `N` to a TLS or
//! GSS request), so `psql` and drivers print the reason instead of "connection reset". The
//! splice is plain TCP <-> unix stream copying: TLS, if a client asks for it, is answered by
//! the cluster (which offers none: the path is loopback or the host's own sandbox link).

use async_trait::async_trait;
use std::net::{IpAddr, SocketAddr};
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

/// Name of the socket file in a cluster's socket directory (port 5432).
pub const SOCKET_NAME: &str = ".s.PGSQL.5432";
/// How long a refused client may take to send its first messages.
const REFUSE_TIMEOUT: Duration = Duration::from_secs(2);
/// Largest startup message read from a refused client, bytes.
const MAX_STARTUP: usize = 10_000;

/// An admitted connection: where to splice it, and what to hold while it lasts.
pub struct Session {
    /// The cluster's socket directory.
    pub socket_dir: PathBuf,
    /// Dropped when the connection ends (the server counts connections with it).
    pub guard: Box<dyn Send + Sync>,
    /// Cancelled to end the connection from the server's side (reset-credentials ends every
    /// session opened before it, those still authenticating with the old password too).
    pub end: CancellationToken,
}

/// Why a connection is refused, as PostgreSQL would say it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// SQLSTATE, e.g. `28000` (invalid authorization) or `57P03` (cannot connect now).
    pub sqlstate: &'static str,
    pub message: String,
}

/// What the server decides about each connection.
#[async_trait]
pub trait Admission: Send + Sync + 'static {
    /// `peer` connected to the port of database `database_id`. `Ok`: the cluster runs and
    /// the connection may be spliced to it; `Err`: the client is refused with that message.
    async fn admit(&self, database_id: &str, peer: SocketAddr) -> Result<Session, Refusal>;
}

/// Listening for one database: dropping it (or [`Binding::close`]) closes its listeners and
/// every connection spliced through them.
pub struct Binding {
    pub port: u16,
    cancel: CancellationToken,
}

impl Binding {
    /// Closes the listeners and ends every spliced connection.
    pub fn close(&self) {
        self.cancel.cancel();
    }
}

impl Drop for Binding {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// The front end: the addresses every database port is opened on, and the port range.
pub struct FrontEnd {
    addrs: Vec<IpAddr>,
    ports: RangeInclusive<u16>,
}

impl FrontEnd {
    /// A front end listening on each of `addrs` (the first is the one in connection URLs)
    /// with ports from `ports`.
    pub fn new(addrs: Vec<IpAddr>, ports: RangeInclusive<u16>) -> Self {
        FrontEnd { addrs, ports }
    }

    /// The addresses listened on.
    pub fn addrs(&self) -> &[IpAddr] {
        &self.addrs
    }

    /// Opens a port for database `database_id` on every address: `preferred` (the port it had
    /// before a restart) if it is free, else the first free one of the range from a random
    /// start. Connections are served with `admission` until the binding is dropped.
    ///
    /// # Errors
    /// `AddrInUse` when no port of the range is free on every address.
    pub async fn bind(
        &self,
        database_id: &str,
        preferred: Option<u16>,
        admission: Arc<dyn Admission>,
    ) -> std::io::Result<Binding> {
        let (lo, hi) = (*self.ports.start(), *self.ports.end());
        let span = u32::from(hi - lo) + 1;
        let offset = rand::random::<u32>() % span;
        let candidates = preferred
            .into_iter()
            .chain((0..span).map(|i| lo + ((offset + i) % span) as u16));
        for port in candidates {
            if let Some(listeners) = self.try_port(port).await {
                let cancel = CancellationToken::new();
                for l in listeners {
                    tokio::spawn(serve(
                        l,
                        database_id.to_string(),
                        admission.clone(),
                        cancel.clone(),
                    ));
                }
                return Ok(Binding { port, cancel });
            }
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            format!("no free database port in {lo}-{hi}"),
        ))
    }

    async fn try_port(&self, port: u16) -> Option<Vec<TcpListener>> {
        let mut out = Vec::new();
        for a in &self.addrs {
            match TcpListener::bind(SocketAddr::new(*a, port)).await {
                Ok(l) => out.push(l),
                Err(_) => return None,
            }
        }
        Some(out)
    }
}

async fn serve(
    listener: TcpListener,
    database_id: String,
    admission: Arc<dyn Admission>,
    cancel: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            _ = cancel.cancelled() => return,
            a = listener.accept() => a,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                warn!(database_id = %database_id, error = %e, "accepting a database connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let (db, adm, c) = (database_id.clone(), admission.clone(), cancel.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = c.cancelled() => {}
                _ = session(stream, peer, &db, adm) => {}
            }
        });
    }
}

async fn session(
    mut stream: TcpStream,
    peer: SocketAddr,
    database_id: &str,
    adm: Arc<dyn Admission>,
) {
    let s = match adm.admit(database_id, peer).await {
        Ok(s) => s,
        Err(r) => {
            debug!(database_id, peer = %peer, reason = %r.message, "database connection refused");
            let _ = tokio::time::timeout(REFUSE_TIMEOUT, refuse(&mut stream, &r)).await;
            return;
        }
    };
    let mut upstream = match UnixStream::connect(s.socket_dir.join(SOCKET_NAME)).await {
        Ok(u) => u,
        Err(e) => {
            warn!(database_id, error = %e, "connecting to the cluster's socket");
            let r = Refusal {
                sqlstate: "57P03",
                message: "the database is not accepting connections right now".into(),
            };
            let _ = tokio::time::timeout(REFUSE_TIMEOUT, refuse(&mut stream, &r)).await;
            return;
        }
    };
    tokio::select! {
        _ = s.end.cancelled() => {}
        _ = tokio::io::copy_bidirectional(&mut stream, &mut upstream) => {}
    }
    drop(s.guard);
}

/// Protocol codes of the special first messages (PostgreSQL protocol 3, "Message Formats").
const SSL_REQUEST: u32 = 80_877_103;
const GSSENC_REQUEST: u32 = 80_877_104;
const CANCEL_REQUEST: u32 = 80_877_102;

/// Reads the client's startup message (declining TLS/GSS first) and answers a FATAL
/// `ErrorResponse` with the refusal; a cancel request is closed without an answer.
async fn refuse(stream: &mut TcpStream, r: &Refusal) -> std::io::Result<()> {
    for _ in 0..3 {
        let len = stream.read_u32().await? as usize;
        if !(8..=MAX_STARTUP).contains(&len) {
            break;
        }
        let mut body = vec![0u8; len - 4];
        stream.read_exact(&mut body).await?;
        let code = u32::from_be_bytes([body[0], body[1], body[2], body[3]]);
        match code {
            SSL_REQUEST | GSSENC_REQUEST => stream.write_all(b"N").await?,
            CANCEL_REQUEST => return Ok(()),
            _ => break,
        }
    }
    stream.write_all(&error_response(r)).await?;
    stream.flush().await?;
    stream.shutdown().await
}

/// A FATAL `ErrorResponse` message.
fn error_response(r: &Refusal) -> Vec<u8> {
    let mut fields = Vec::new();
    for (tag, value) in [
        (b'S', "FATAL"),
        (b'V', "FATAL"),
        (b'C', r.sqlstate),
        (b'M', r.message.as_str()),
    ] {
        fields.push(tag);
        fields.extend(value.bytes().filter(|b| *b != 0));
        fields.push(0);
    }
    fields.push(0);
    let mut out = vec![b'E'];
    out.extend(((fields.len() + 4) as u32).to_be_bytes());
    out.extend(fields);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_responses_are_well_formed() {
        let m = error_response(&Refusal {
            sqlstate: "28000",
            message: "no".into(),
        });
        assert_eq!(m[0], b'E');
        let len = u32::from_be_bytes([m[1], m[2], m[3], m[4]]) as usize;
        assert_eq!(len + 1, m.len());
        assert!(m.ends_with(b"C28000\x00Mno\x00\x00"), "{m:?}");
    }

    struct Refuser;

    #[async_trait]
    impl Admission for Refuser {
        async fn admit(&self, _: &str, _: SocketAddr) -> Result<Session, Refusal> {
            Err(Refusal {
                sqlstate: "28000",
                message: "not yours".into(),
            })
        }
    }

    #[tokio::test]
    async fn refused_clients_hear_why_after_tls_is_declined() {
        let fe = FrontEnd::new(vec![IpAddr::from([127, 0, 0, 1])], 40000..=40999);
        let b = fe.bind("db", None, Arc::new(Refuser)).await.unwrap();
        let mut c = TcpStream::connect(("127.0.0.1", b.port)).await.unwrap();
        c.write_all(&[0, 0, 0, 8, 4, 210, 22, 47]).await.unwrap();
        let mut n = [0u8; 1];
        c.read_exact(&mut n).await.unwrap();
        assert_eq!(&n, b"N");
        // A startup message: length, protocol 3.0, user=x, terminator.
        let mut startup = vec![0, 3, 0, 0];
        startup.extend(b"user\0x\0\0");
        let mut msg = ((startup.len() + 4) as u32).to_be_bytes().to_vec();
        msg.extend(startup);
        c.write_all(&msg).await.unwrap();
        let mut reply = Vec::new();
        c.read_to_end(&mut reply).await.unwrap();
        assert_eq!(reply[0], b'E');
        assert!(String::from_utf8_lossy(&reply).contains("not yours"));
        // The same port cannot be had twice while bound; dropping the binding frees it.
        let port = b.port;
        drop(b);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let again = fe.bind("db", Some(port), Arc::new(Refuser)).await.unwrap();
        assert_eq!(again.port, port);
    }
}
