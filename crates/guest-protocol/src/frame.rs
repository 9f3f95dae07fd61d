//! Framing: `[u32 header_len][u32 body_len][header JSON][body bytes]`, lengths big-endian.
//!
//! The header is a JSON-encoded [`crate::HostMsg`] or [`crate::GuestMsg`]; the body is raw bytes
//! whose meaning the header gives (a file chunk, process output). The shim reads only the two
//! lengths so that it forwards whole frames and never interleaves two writers' bytes.

use std::io::{self, Read, Write};

/// Largest header accepted, in bytes. A bigger length means a corrupt stream.
pub const MAX_HEADER_BYTES: u32 = 16 * 1024 * 1024;
/// Largest body accepted, in bytes. Writers split larger payloads into several frames.
pub const MAX_BODY_BYTES: u32 = 4 * 1024 * 1024;

/// One frame as read off the wire: the undecoded JSON header and the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// JSON bytes of the message.
    pub header: Vec<u8>,
    /// Raw payload; empty for most messages.
    pub body: Vec<u8>,
}

/// Errors of reading or writing a frame.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The peer closed the stream at a frame boundary.
    #[error("channel closed")]
    Closed,
    /// A length field exceeded [`MAX_HEADER_BYTES`] or [`MAX_BODY_BYTES`].
    #[error("frame too large: header {header} bytes, body {body} bytes")]
    TooLarge { header: u32, body: u32 },
    /// The header was not a valid message.
    #[error("bad frame header: {0}")]
    Decode(#[from] serde_json::Error),
    /// Reading or writing failed.
    #[error("channel i/o: {0}")]
    Io(#[from] io::Error),
}

impl Frame {
    /// Encodes `msg` as the header with `body` attached.
    ///
    /// # Errors
    /// [`FrameError::Decode`] if `msg` cannot be serialized (never for the types of this crate).
    pub fn new<T: serde::Serialize>(msg: &T, body: Vec<u8>) -> Result<Self, FrameError> {
        Ok(Frame {
            header: serde_json::to_vec(msg)?,
            body,
        })
    }

    /// Decodes the header as a message of type `T`.
    ///
    /// # Errors
    /// [`FrameError::Decode`] if the header is not a `T`.
    pub fn decode<T: serde::de::DeserializeOwned>(&self) -> Result<T, FrameError> {
        Ok(serde_json::from_slice(&self.header)?)
    }

    /// The 8-byte prefix of this frame: header and body lengths, big-endian.
    pub fn prefix(&self) -> [u8; 8] {
        let mut p = [0u8; 8];
        p[..4].copy_from_slice(&(self.header.len() as u32).to_be_bytes());
        p[4..].copy_from_slice(&(self.body.len() as u32).to_be_bytes());
        p
    }

    /// Parses an 8-byte prefix into `(header_len, body_len)` and checks both limits.
    ///
    /// # Errors
    /// [`FrameError::TooLarge`] when either length is over its limit.
    pub fn parse_prefix(p: &[u8; 8]) -> Result<(u32, u32), FrameError> {
        let header = u32::from_be_bytes([p[0], p[1], p[2], p[3]]);
        let body = u32::from_be_bytes([p[4], p[5], p[6], p[7]]);
        if header > MAX_HEADER_BYTES || body > MAX_BODY_BYTES {
            return Err(FrameError::TooLarge { header, body });
        }
        Ok((header, body))
    }
}

/// Reads one whole frame (blocking).
///
/// # Errors
/// [`FrameError::Closed`] on end of stream before the first byte, [`FrameError::Io`] on a
/// truncated frame or read failure, [`FrameError::TooLarge`] on a corrupt prefix.
pub fn read_frame<R: Read>(r: &mut R) -> Result<Frame, FrameError> {
    let mut prefix = [0u8; 8];
    let mut got = 0;
    while got < prefix.len() {
        match r.read(&mut prefix[got..]) {
            Ok(0) if got == 0 => return Err(FrameError::Closed),
            Ok(0) => return Err(FrameError::Io(io::ErrorKind::UnexpectedEof.into())),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let (hlen, blen) = Frame::parse_prefix(&prefix)?;
    let mut header = vec![0u8; hlen as usize];
    r.read_exact(&mut header)?;
    let mut body = vec![0u8; blen as usize];
    r.read_exact(&mut body)?;
    Ok(Frame { header, body })
}

/// Writes one whole frame (blocking) and flushes.
///
/// # Errors
/// [`FrameError::Io`] when the write fails.
pub fn write_frame<W: Write>(w: &mut W, frame: &Frame) -> Result<(), FrameError> {
    w.write_all(&frame.prefix())?;
    w.write_all(&frame.header)?;
    w.write_all(&frame.body)?;
    w.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_limits() {
        let f = Frame {
            header: b"{\"a\":1}".to_vec(),
            body: vec![0, 255, 7],
        };
        let mut buf = Vec::new();
        write_frame(&mut buf, &f).unwrap();
        let back = read_frame(&mut buf.as_slice()).unwrap();
        assert_eq!(back, f);
        assert!(matches!(read_frame(&mut &[][..]), Err(FrameError::Closed)));
        let mut bad = vec![0xff; 8];
        bad.extend_from_slice(b"xx");
        assert!(matches!(
            read_frame(&mut bad.as_slice()),
            Err(FrameError::TooLarge { .. })
        ));
        assert!(matches!(read_frame(&mut &buf[..5]), Err(FrameError::Io(_))));
    }
}
