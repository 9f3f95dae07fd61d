//! Blocking reads and writes on the host channel's fds even when gVisor hands them to us
//! non-blocking (host-backed stdio can be `O_NONBLOCK`): `EAGAIN` waits in `poll` instead of
//! surfacing as an error. Without this, a slow host turns a large transfer into a torn frame
//! (a `write_all` that stops half-way) and the channel is lost.

use std::io;
use std::os::unix::io::RawFd;

/// One of the channel's fds (0 for reading, 1 for writing).
pub struct HostFd(pub RawFd);

impl HostFd {
    fn wait(&self, events: libc::c_short) {
        let mut pfd = libc::pollfd {
            fd: self.0,
            events,
            revents: 0,
        };
        // SAFETY: `pfd` is a valid pollfd for the duration of the call; nfds is 1.
        unsafe {
            libc::poll(&mut pfd, 1, 1000);
        }
    }
}

impl io::Read for HostFd {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            // SAFETY: `buf` is valid for writes of `buf.len()` bytes.
            let n = unsafe { libc::read(self.0, buf.as_mut_ptr().cast(), buf.len()) };
            if n >= 0 {
                return Ok(n as usize);
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => self.wait(libc::POLLIN),
                io::ErrorKind::Interrupted => {}
                _ => return Err(e),
            }
        }
    }
}

impl io::Write for HostFd {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        loop {
            // SAFETY: `buf` is valid for reads of `buf.len()` bytes.
            let n = unsafe { libc::write(self.0, buf.as_ptr().cast(), buf.len()) };
            if n >= 0 {
                return Ok(n as usize);
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => self.wait(libc::POLLOUT),
                io::ErrorKind::Interrupted => {}
                _ => return Err(e),
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::HostFd;
    use std::io::{Read, Write};
    use std::os::unix::io::AsRawFd;

    #[test]
    fn nonblocking_socket_is_written_and_read_whole() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        b.set_nonblocking(true).unwrap();
        let data: Vec<u8> = (0..4_000_000u32).map(|i| i as u8).collect();
        let expect = data.clone();
        let fd_b = b.as_raw_fd();
        let reader = std::thread::spawn(move || {
            let mut got = vec![0u8; expect.len()];
            HostFd(fd_b).read_exact(&mut got).unwrap();
            assert_eq!(got, expect);
            drop(b);
        });
        HostFd(a.as_raw_fd()).write_all(&data).unwrap();
        reader.join().unwrap();
    }
}
