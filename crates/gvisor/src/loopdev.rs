//! Loop-device mounts made in this process: `open` + `LOOP_CONFIGURE` + `mount(2)`, and
//! `umount2(2)`.
//!
//! A volume is mounted on every attach that finds it closed (issue 9: "attaching adds at most
//! ~20 ms to a create") and an instance's disk on every restore that is not onto a prepared
//! target. Through util-linux that costs a `mount` process (exec, libmount reading the mount
//! table and `/etc/fstab`, scanning every loop device for one already backed by the file) on
//! top of the kernel's own work; here it is three system calls and the ext4 mount itself.
//!
//! The loop device is configured with `LO_FLAGS_AUTOCLEAR`: once the filesystem is unmounted
//! and no descriptor is open, the kernel detaches it, exactly as `mount -o loop` does, so
//! [`crate::disk::collect_stale`] and `losetup -a` see the same thing either way.
//! Constants and layouts are the kernel's UAPI (`include/uapi/linux/loop.h`); `libc` does not
//! carry them.

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// `LOOP_CTL_GET_FREE` on `/dev/loop-control`: the index of a free loop device (made if none).
const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
/// `LOOP_CONFIGURE` on `/dev/loopN`: bind a file and set the status in one call (Linux 5.8).
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
/// `lo_flags`: the device refuses writes.
const LO_FLAGS_READ_ONLY: u32 = 1;
/// `lo_flags`: detach when the last user (mount or descriptor) goes.
const LO_FLAGS_AUTOCLEAR: u32 = 4;
/// How many times a free device is looked for when another process takes the one offered.
const CLAIM_ATTEMPTS: usize = 8;

/// `struct loop_info64` of `linux/loop.h` (232 bytes).
#[repr(C)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; 64],
    lo_crypt_name: [u8; 64],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

/// `struct loop_config` of `linux/loop.h` (304 bytes).
#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

/// How an image is mounted: the `MS_*` flags and the filesystem's option string.
#[derive(Debug, Clone, Copy)]
pub struct MountOptions<'a> {
    /// Read-only: the image is opened read-only, the device and the mount refuse writes.
    pub read_only: bool,
    /// ext4 options passed as mount data (for example `noinit_itable`), `""` for none.
    pub data: &'a str,
}

fn cstring(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
}

/// Binds `image` to a free loop device with autoclear; returns the open device and its path.
/// The device is detached again when the returned file is closed unless something (a mount)
/// holds it.
fn attach(image: &File, name: &Path, read_only: bool) -> io::Result<(File, PathBuf)> {
    let control = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/loop-control")?;
    let mut config = LoopConfig {
        fd: u32::try_from(image.as_raw_fd()).map_err(io::Error::other)?,
        block_size: 0,
        info: LoopInfo64 {
            lo_device: 0,
            lo_inode: 0,
            lo_rdevice: 0,
            lo_offset: 0,
            lo_sizelimit: 0,
            lo_number: 0,
            lo_encrypt_type: 0,
            lo_encrypt_key_size: 0,
            lo_flags: LO_FLAGS_AUTOCLEAR | if read_only { LO_FLAGS_READ_ONLY } else { 0 },
            lo_file_name: [0; 64],
            lo_crypt_name: [0; 64],
            lo_encrypt_key: [0; 32],
            lo_init: [0; 2],
        },
        reserved: [0; 8],
    };
    // The name is informational (`losetup -l` shows it); sysfs reports the real backing path.
    let bytes = name.as_os_str().as_bytes();
    let n = bytes.len().min(63);
    config.info.lo_file_name[..n].copy_from_slice(&bytes[..n]);
    let mut last = io::Error::from_raw_os_error(libc::EBUSY);
    for _ in 0..CLAIM_ATTEMPTS {
        // SAFETY: LOOP_CTL_GET_FREE takes no argument and returns an index or -1; `control`
        // is an open descriptor of /dev/loop-control for the whole call.
        let index = unsafe { libc::ioctl(control.as_raw_fd(), LOOP_CTL_GET_FREE) };
        if index < 0 {
            return Err(io::Error::last_os_error());
        }
        let path = PathBuf::from(format!("/dev/loop{index}"));
        let device = OpenOptions::new()
            .read(true)
            .write(!read_only)
            .open(&path)?;
        // SAFETY: `config` is a fully initialised `struct loop_config` with the kernel's
        // layout (repr(C), sizes as in linux/loop.h) that lives across the call; the kernel
        // only reads it. `device` is an open loop device.
        let rc = unsafe {
            libc::ioctl(
                device.as_raw_fd(),
                LOOP_CONFIGURE,
                std::ptr::addr_of_mut!(config),
            )
        };
        if rc == 0 {
            return Ok((device, path));
        }
        last = io::Error::last_os_error();
        // Another process bound that device between GET_FREE and CONFIGURE: ask again.
        if last.raw_os_error() != Some(libc::EBUSY) {
            return Err(last);
        }
    }
    Err(last)
}

/// Mounts the ext4 filesystem in `image` on `mount_point` (which must exist) through a loop
/// device that the kernel detaches when the filesystem is unmounted. Always `nodev`,
/// `nosuid` and `noatime`.
///
/// # Errors
/// The image cannot be opened, no loop device can be bound (after a few retries when other
/// processes take the free ones), or `mount(2)` fails (the device is detached again).
pub fn mount(image: &Path, mount_point: &Path, opts: MountOptions<'_>) -> io::Result<()> {
    let file = OpenOptions::new()
        .read(true)
        .write(!opts.read_only)
        .open(image)?;
    // `device` stays open until mount returns, so the device cannot be detached before.
    let (device, path) = attach(&file, image, opts.read_only)?;
    let dev_name = cstring(&path)?;
    let target = cstring(mount_point)?;
    let data =
        CString::new(opts.data).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let mut flags = libc::MS_NODEV | libc::MS_NOSUID | libc::MS_NOATIME;
    if opts.read_only {
        flags |= libc::MS_RDONLY;
    }
    // SAFETY: every pointer is a NUL-terminated string that outlives the call; "ext4" is a
    // static C string.
    let rc = unsafe {
        libc::mount(
            dev_name.as_ptr(),
            target.as_ptr(),
            c"ext4".as_ptr(),
            flags,
            data.as_ptr().cast(),
        )
    };
    let result = if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    };
    // On failure, closing the device detaches it (autoclear, no mount holds it).
    drop(device);
    result
}

/// `umount2(mount_point, flags)`: `0` or `libc::MNT_DETACH` (lazy).
///
/// # Errors
/// The kernel's error: `EBUSY` while files are open on it, `EINVAL` when it is not a mount
/// point.
pub fn unmount(mount_point: &Path, flags: libc::c_int) -> io::Result<()> {
    let target = cstring(mount_point)?;
    // SAFETY: `target` is a NUL-terminated path that outlives the call.
    if unsafe { libc::umount2(target.as_ptr(), flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structs_have_the_kernels_sizes() {
        assert_eq!(std::mem::size_of::<LoopInfo64>(), 232);
        assert_eq!(std::mem::size_of::<LoopConfig>(), 304);
    }
}
