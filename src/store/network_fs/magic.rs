//! Linux's network filesystems by the magic number `statfs` reports in `f_type`: the values of
//! `linux/magic.h` and statfs(2), and those of the filesystems built outside the kernel tree
//! (as GNU coreutils' `stat` knows them, which marks them remote).

/// The magic number of `f_type`, as the 32 bits every magic fits in. `f_type` is a signed
/// word on most targets, so a 32-bit system reports `CIFS_SUPER_MAGIC` (0xFF534D42) as a
/// negative number; its low 32 bits are the magic all the same.
pub fn of(f_type: impl Into<i128>) -> u32 {
    u32::try_from(f_type.into() & 0xFFFF_FFFF).unwrap_or(0)
}

/// The type name of the network filesystem whose magic number is `magic`, as `mount -t` and
/// `/proc/mounts` spell it; `None` for every other filesystem. Refused are those that other
/// hosts reach (file servers, cluster and parallel filesystems, a VM's folders shared with its
/// host), and FUSE, whose daemon may be any of these.
pub fn network(magic: u32) -> Option<&'static str> {
    Some(match magic {
        // File servers: NFS (every version), SMB (smbfs, CIFS, SMB 2 and 3), NetWare, Coda, AFS
        // (OpenAFS's, and the kernel's kAFS).
        0x6969 => "nfs",
        0x517B => "smb",
        0xFF53_4D42 => "cifs",
        0xFE53_4D42 => "smb2",
        0x564C => "ncpfs",
        0x7375_7245 => "coda",
        0x5346_414F | 0x6B41_4653 => "afs",
        // Cluster and parallel filesystems, on many hosts at once.
        0x00C3_6400 => "ceph",
        0x0BD0_0BD0 => "lustre",
        0x4750_4653 => "gpfs",
        0x1983_0326 => "beegfs",
        0xAAD7_AAEA => "panfs",
        0x0131_11A8 => "ibrix",
        0xBEEF_DEAD => "snfs",
        0x6163_6673 => "acfs",
        0x7461_636F => "ocfs2",
        0x0116_1970 => "gfs2",
        // A folder shared with a VM's host or another VM: 9p (virtio and QEMU shares, WSL 2's
        // Windows drives), VirtualBox, Parallels, VMware.
        0x0102_1997 => "9p",
        0x786F_4256 => "vboxsf",
        0x7C7C_6673 => "prl_fs",
        0xBACB_ACBC => "vmhgfs",
        // Every FUSE filesystem (sshfs, GlusterFS, s3fs, bindfs, virtiofs…): one magic for all.
        0x6573_5546 => "fuse",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_filesystems_are_named_and_local_ones_are_not() {
        let table: [(u32, Option<&str>); 38] = [
            (0x6969, Some("nfs")),
            (0x517B, Some("smb")),
            (0xFF53_4D42, Some("cifs")),
            (0xFE53_4D42, Some("smb2")),
            (0x564C, Some("ncpfs")),
            (0x7375_7245, Some("coda")),
            (0x5346_414F, Some("afs")),
            (0x6B41_4653, Some("afs")),
            (0x00C3_6400, Some("ceph")),
            (0x0BD0_0BD0, Some("lustre")),
            (0x4750_4653, Some("gpfs")),
            (0x1983_0326, Some("beegfs")),
            (0xAAD7_AAEA, Some("panfs")),
            (0x0131_11A8, Some("ibrix")),
            (0xBEEF_DEAD, Some("snfs")),
            (0x6163_6673, Some("acfs")),
            (0x7461_636F, Some("ocfs2")),
            (0x0116_1970, Some("gfs2")),
            (0x0102_1997, Some("9p")),
            (0x786F_4256, Some("vboxsf")),
            (0x7C7C_6673, Some("prl_fs")),
            (0xBACB_ACBC, Some("vmhgfs")),
            (0x6573_5546, Some("fuse")),
            // Local: ext2/3/4, XFS, Btrfs, ZFS, F2FS, bcachefs; tmpfs and ramfs (tmpfs is one
            // away from 9p); overlayfs (a container's root, over local layers); eCryptfs and
            // squashfs; FUSE's control filesystem (one away from FUSE); the NFS server's
            // control filesystem; proc; and no filesystem at all.
            (0xEF53, None),
            (0x5846_5342, None),
            (0x9123_683E, None),
            (0x2FC1_2FC1, None),
            (0xF2F5_2010, None),
            (0xCA45_1A4E, None),
            (0x0102_1994, None),
            (0x8584_58F6, None),
            (0x794C_7630, None),
            (0xF15F, None),
            (0x7371_7368, None),
            (0x6573_5543, None),
            (0x6E66_7364, None),
            (0x9FA0, None),
            (0, None),
        ];
        for (magic, name) in table {
            assert_eq!(network(magic), name, "{magic:#010X}");
        }
    }

    #[test]
    fn a_magic_is_its_low_32_bits_whatever_the_width_and_sign_of_f_type() {
        // CIFS as a 64-bit and a 32-bit `f_type`, signed and unsigned.
        assert_eq!(of(0xFF53_4D42_i64), 0xFF53_4D42);
        assert_eq!(of(0xFF53_4D42_u64), 0xFF53_4D42);
        assert_eq!(of(0xFF53_4D42_u32), 0xFF53_4D42);
        assert_eq!(of(-11_317_950_i32), 0xFF53_4D42);
        assert_eq!(of(0x6969_i64), 0x6969);
        assert_eq!(network(of(-11_317_950_i32)), Some("cifs"));
    }
}
