//! macOS's and FreeBSD's network filesystems by the type name `statfs` reports in
//! `f_fstypename`. (Compiled into Linux's tests too, so that the table is tested there.)

/// The type name of the network filesystem whose `f_fstypename` is `type_name`, as `mount`
/// shows it; `None` for every other filesystem. FreeBSD names a FUSE filesystem after its
/// daemon too (`fusefs.sshfs`): every FUSE filesystem is refused, as on Linux.
pub fn network(type_name: &str) -> Option<&'static str> {
    let kind = type_name.split('.').next().unwrap_or(type_name);
    Some(match kind {
        "nfs" => "nfs",
        "oldnfs" => "oldnfs",
        "smbfs" => "smbfs",
        "afpfs" => "afpfs",
        "webdav" => "webdav",
        "p9fs" => "p9fs",
        "fusefs" => "fusefs",
        "macfuse" => "macfuse",
        "osxfuse" => "osxfuse",
        "osxfusefs" => "osxfusefs",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_filesystems_are_named_and_local_ones_are_not() {
        let table: [(&str, Option<&str>); 22] = [
            ("nfs", Some("nfs")),
            ("oldnfs", Some("oldnfs")),
            ("smbfs", Some("smbfs")),
            ("afpfs", Some("afpfs")),
            ("webdav", Some("webdav")),
            ("p9fs", Some("p9fs")),
            ("fusefs", Some("fusefs")),
            ("fusefs.sshfs", Some("fusefs")),
            ("macfuse", Some("macfuse")),
            ("osxfuse", Some("osxfuse")),
            ("osxfusefs", Some("osxfusefs")),
            ("apfs", None),
            ("hfs", None),
            ("ufs", None),
            ("zfs", None),
            ("tmpfs", None),
            ("devfs", None),
            ("msdosfs", None),
            ("cd9660", None),
            ("nullfs", None),
            ("unionfs", None),
            ("", None),
        ];
        for (type_name, name) in table {
            assert_eq!(network(type_name), name, "{type_name:?}");
        }
    }
}
