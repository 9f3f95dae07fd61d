//! The HTTP accept loop: what `axum::serve` does, with one difference: a client that closes
//! its side of the connection right after sending a request (a half-close, or a close without
//! reading the reply) still has the request carried out.
//!
//! hyper's HTTP/1 default is to treat an EOF in the middle of a request as the client giving up
//! and to drop the connection, and the handler's future with it. A `DELETE` whose client closed
//! the socket at once was then lost whenever the EOF was read before the handler's first poll
//! (4 of 15 such deletes on an idle server here): issue 8 point 5, "a client that gives up
//! cancels the delete". With half-close allowed the request runs; [`crate::to_completion`]
//! then keeps it running to its answer even when the connection goes.

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::time::Duration;
use tokio::net::TcpListener;
use tracing::{debug, warn};

/// Serves `app` on `listener` until `stop` resolves, then stops accepting and waits for the
/// open connections to finish their requests (the caller bounds that wait).
///
/// Connections are HTTP/1.1 or HTTP/2 (by preface), with upgrades (the port proxy's
/// WebSockets), `TCP_NODELAY` set, and HTTP/1 half-closes allowed (see the module doc).
///
/// # Errors
/// None today: a failed `accept` (for example too many open files) is logged and retried after
/// a moment, as `axum::serve` does.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    stop: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let mut builder = Builder::new(TokioExecutor::new());
    builder.http1().half_close(true);
    let graceful = GracefulShutdown::new();
    tokio::pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    warn!(error = %e, "accepting a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        if let Err(e) = stream.set_nodelay(true) {
            debug!(error = %e, "setting TCP_NODELAY");
        }
        let (builder, watcher) = (builder.clone(), graceful.watcher());
        let service = TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
            if let Err(e) = watcher.watch(conn).await {
                // A client that went away mid-request; nothing to do.
                debug!(%peer, error = %e, "connection ended");
            }
        });
    }
    graceful.shutdown().await;
    Ok(())
}
