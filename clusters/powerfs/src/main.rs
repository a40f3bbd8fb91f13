//! powerfs: a FUSE filesystem over a backing directory that keeps in its own memory everything
//! its users have not made durable, so that a power loss can drop it, as Jepsen's lazyfs does.
//!
//! - File data: writes land in a page cache of this process; `fsync`/`fdatasync` of a file
//!   writes its pages (and its size) to the backing file and fsyncs it. Reads see the cache.
//! - Names: creates, removals and renames reach the backing directory at once (a removed or
//!   replaced file is moved to a trash directory, not deleted), and are journalled until the
//!   next fsync, of any file or directory: as on ext4 and XFS, whose one journal an fsync
//!   forces, with every name change made before it (what Postgres relies on).
//! - A rename that replaces a file first makes the data of the file renamed durable, as ext4's
//!   `auto_da_alloc` (on by default) does: the replace-via-rename idiom without an fsync leaves
//!   the old file or the new one after a loss, never an empty one.
//! - As an OS does without being asked, data unsynced for `--writeback` seconds (30, Linux's
//!   dirty expiry) is written back, and name changes older than `--commit` seconds (5, ext4's
//!   journal commit) become durable.
//! - `lose` (on the control socket): every unsynced page is dropped and every journalled name
//!   change is undone, newest first: the backing directory is then what a machine that lost
//!   power would find on its disk. `sync` makes everything durable (a machine that settled);
//!   `stats` says how much is unsynced.
//!
//! Every open is direct I/O, so the kernel caches no data of ours that a loss could leave stale,
//! and entries and attributes are not cached either. Files are created as the calling user.
//!
//! Usage: powerfs BACKING MOUNTPOINT CONTROL_SOCKET [--writeback SECS] [--commit SECS]

use fuser::{
    consts::FOPEN_DIRECT_IO, FileAttr, FileType, Filesystem, KernelConfig, MountOption,
    ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen,
    ReplyStatfs, ReplyWrite, Request, TimeOrNow, FUSE_ROOT_ID,
};
use std::collections::{BTreeMap, HashMap};
use std::ffi::{CString, OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const PAGE: u64 = 4096;
const TTL: Duration = Duration::ZERO; // the kernel caches no entry or attribute of ours
const WRITEBACK_AT: u64 = 256 << 20; // past this much unsynced data, write the largest file back

/// A change of names not yet made durable by an fsync of the directory that holds it.
enum Change {
    Created { path: PathBuf },
    Removed { path: PathBuf, kept: PathBuf },
    Renamed { from: PathBuf, to: PathBuf, replaced: Option<PathBuf> },
}

impl Change {
    /// What it kept aside to undo it, which is no longer needed once it is durable.
    fn settle(self) {
        let kept = match self {
            Change::Removed { kept, .. } | Change::Renamed { replaced: Some(kept), .. } => kept,
            _ => return,
        };
        let _ = if kept.is_dir() { fs::remove_dir_all(kept) } else { fs::remove_file(kept) };
    }
}

struct Dirty {
    since: Instant,                // when its oldest unsynced write came
    pages: BTreeMap<u64, Vec<u8>>, // page number → PAGE bytes
    size: u64,                     // the file's size as its users see it
    cut: u64,                      // the backing file's bytes from here on are gone (truncated)
}

struct State {
    backing: PathBuf,
    trash: PathBuf,
    paths: HashMap<u64, PathBuf>, // inode → path relative to the backing directory
    inodes: HashMap<PathBuf, u64>,
    next_inode: u64,
    dirty: HashMap<u64, Dirty>,
    journal: Vec<(Instant, Change)>,
    kept: u64,            // trash entries made
    writeback: Duration,  // unsynced data older than this is written back, as an OS does
    commit: Duration,     // name changes older than this are durable, as a journal commits them
}

fn errno(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

fn time_of(secs: i64, nsecs: i64) -> SystemTime {
    if secs >= 0 {
        UNIX_EPOCH + Duration::new(secs as u64, nsecs as u32)
    } else {
        UNIX_EPOCH
    }
}

fn kind_of(meta: &fs::Metadata) -> FileType {
    let t = meta.file_type();
    if t.is_dir() {
        FileType::Directory
    } else if t.is_symlink() {
        FileType::Symlink
    } else {
        FileType::RegularFile
    }
}

fn cstring(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).unwrap_or_default()
}

fn chown(path: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    let c = cstring(path);
    if unsafe { libc::lchown(c.as_ptr(), uid, gid) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

impl State {
    fn new(backing: PathBuf, trash: PathBuf, writeback: Duration, commit: Duration) -> State {
        let mut s = State {
            backing,
            trash,
            paths: HashMap::new(),
            inodes: HashMap::new(),
            next_inode: FUSE_ROOT_ID + 1,
            dirty: HashMap::new(),
            journal: Vec::new(),
            kept: 0,
            writeback,
            commit,
        };
        s.paths.insert(FUSE_ROOT_ID, PathBuf::new());
        s.inodes.insert(PathBuf::new(), FUSE_ROOT_ID);
        s
    }

    fn real(&self, rel: &Path) -> PathBuf {
        self.backing.join(rel)
    }

    fn path(&self, ino: u64) -> Result<PathBuf, i32> {
        self.paths.get(&ino).cloned().ok_or(libc::ENOENT)
    }

    fn inode(&mut self, rel: &Path) -> u64 {
        if let Some(ino) = self.inodes.get(rel) {
            return *ino;
        }
        let ino = self.next_inode;
        self.next_inode += 1;
        self.paths.insert(ino, rel.to_path_buf());
        self.inodes.insert(rel.to_path_buf(), ino);
        ino
    }

    /// Follow a rename in the inode table: `from` and everything below it now live at `to`.
    fn moved(&mut self, from: &Path, to: &Path) {
        let dropped: Vec<u64> = self.inodes.remove(to).into_iter().collect();
        for ino in dropped {
            self.paths.remove(&ino);
            self.dirty.remove(&ino);
        }
        let affected: Vec<(PathBuf, u64)> = self
            .inodes
            .iter()
            .filter(|(p, _)| p.starts_with(from))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        for (old, ino) in affected {
            let below = old.strip_prefix(from).unwrap_or(Path::new(""));
            let new = if below.as_os_str().is_empty() { to.to_path_buf() } else { to.join(below) };
            self.inodes.remove(&old);
            self.inodes.insert(new.clone(), ino);
            self.paths.insert(ino, new);
        }
    }

    fn forget_path(&mut self, rel: &Path) {
        if let Some(ino) = self.inodes.remove(rel) {
            self.paths.remove(&ino);
            self.dirty.remove(&ino);
        }
    }

    fn attr(&self, ino: u64, rel: &Path) -> Result<FileAttr, i32> {
        let meta = fs::symlink_metadata(self.real(rel)).map_err(|e| errno(&e))?;
        let size = self.dirty.get(&ino).map_or(meta.len(), |d| d.size);
        Ok(FileAttr {
            ino,
            size,
            blocks: size.div_ceil(512),
            atime: time_of(meta.atime(), meta.atime_nsec()),
            mtime: time_of(meta.mtime(), meta.mtime_nsec()),
            ctime: time_of(meta.ctime(), meta.ctime_nsec()),
            crtime: time_of(meta.ctime(), meta.ctime_nsec()),
            kind: kind_of(&meta),
            perm: (meta.mode() & 0o7777) as u16,
            nlink: meta.nlink() as u32,
            uid: meta.uid(),
            gid: meta.gid(),
            rdev: meta.rdev() as u32,
            blksize: PAGE as u32,
            flags: 0,
        })
    }

    fn child(&mut self, parent: u64, name: &OsStr) -> Result<PathBuf, i32> {
        Ok(self.path(parent)?.join(name))
    }

    /// Move `rel` out of the way into the trash, returning where it went.
    fn keep(&mut self, rel: &Path) -> std::io::Result<PathBuf> {
        self.kept += 1;
        let kept = self.trash.join(format!("{}", self.kept));
        fs::rename(self.real(rel), &kept)?;
        Ok(kept)
    }

    /// The bytes [offset, offset + size) as the file's users see them.
    fn read(&self, ino: u64, rel: &Path, offset: u64, size: u64) -> std::io::Result<Vec<u8>> {
        let backing_len = fs::metadata(self.real(rel))?.len();
        let len = self.dirty.get(&ino).map_or(backing_len, |d| d.size);
        let backing_len = self.dirty.get(&ino).map_or(backing_len, |d| d.cut.min(backing_len));
        if offset >= len {
            return Ok(Vec::new());
        }
        let end = len.min(offset + size);
        let mut out = vec![0u8; (end - offset) as usize];
        if offset < backing_len {
            let file = File::open(self.real(rel))?;
            let upto = (backing_len.min(end) - offset) as usize;
            let mut done = 0;
            while done < upto {
                let n = file.read_at(&mut out[done..upto], offset + done as u64)?;
                if n == 0 {
                    break;
                }
                done += n;
            }
        }
        if let Some(d) = self.dirty.get(&ino) {
            for (page, bytes) in d.pages.range(offset / PAGE..=(end - 1) / PAGE) {
                let start = page * PAGE;
                let lo = start.max(offset);
                let hi = (start + PAGE).min(end);
                out[(lo - offset) as usize..(hi - offset) as usize]
                    .copy_from_slice(&bytes[(lo - start) as usize..(hi - start) as usize]);
            }
        }
        Ok(out)
    }

    fn dirty_entry(&mut self, ino: u64, rel: &Path) -> std::io::Result<&mut Dirty> {
        if !self.dirty.contains_key(&ino) {
            let size = fs::metadata(self.real(rel))?.len();
            let since = Instant::now();
            self.dirty.insert(ino, Dirty { since, pages: BTreeMap::new(), size, cut: size });
        }
        Ok(self.dirty.get_mut(&ino).expect("inserted above"))
    }

    fn write(&mut self, ino: u64, rel: &Path, offset: u64, data: &[u8]) -> std::io::Result<()> {
        let end = offset + data.len() as u64;
        let mut pos = offset;
        while pos < end {
            let page = pos / PAGE;
            let start = page * PAGE;
            if !self.dirty_entry(ino, rel)?.pages.contains_key(&page) {
                let current = self.read(ino, rel, start, PAGE)?;
                let mut fresh = vec![0u8; PAGE as usize];
                fresh[..current.len()].copy_from_slice(&current);
                self.dirty_entry(ino, rel)?.pages.insert(page, fresh);
            }
            let hi = (start + PAGE).min(end);
            let d = self.dirty_entry(ino, rel)?;
            let bytes = d.pages.get_mut(&page).expect("inserted above");
            bytes[(pos - start) as usize..(hi - start) as usize]
                .copy_from_slice(&data[(pos - offset) as usize..(hi - offset) as usize]);
            pos = hi;
        }
        let d = self.dirty_entry(ino, rel)?;
        d.size = d.size.max(end);
        if self.unsynced() > WRITEBACK_AT {
            // an OS writes dirty pages back eventually too: what it wrote may survive a loss
            if let Some((&big, _)) = self.dirty.iter().max_by_key(|(_, d)| d.pages.len()) {
                if let Some(path) = self.paths.get(&big).cloned() {
                    self.flush(big, &path, Sync::No)?;
                }
            }
        }
        Ok(())
    }

    fn truncate(&mut self, ino: u64, rel: &Path, size: u64) -> std::io::Result<()> {
        let d = self.dirty_entry(ino, rel)?;
        d.pages.retain(|page, _| page * PAGE < size);
        if let Some(bytes) = d.pages.get_mut(&(size / PAGE)) {
            bytes[(size % PAGE) as usize..].fill(0);
        }
        d.cut = d.cut.min(size); // grown again later, the file reads zeros past here
        d.size = size;
        Ok(())
    }

    /// Write a file's unsynced pages and size to the backing file, then make them durable there
    /// as the caller asked: `Sync::Data` as fdatasync(2) does (the data, and the metadata needed
    /// to read it), `Sync::All` as fsync(2).
    fn flush(&mut self, ino: u64, rel: &Path, sync: Sync) -> std::io::Result<()> {
        let file = OpenOptions::new().write(true).open(self.real(rel))?;
        if let Some(d) = self.dirty.remove(&ino) {
            if d.cut < file.metadata()?.len() {
                file.set_len(d.cut)?;
            }
            for (page, bytes) in &d.pages {
                let start = page * PAGE;
                if start >= d.size {
                    continue;
                }
                let len = (d.size - start).min(PAGE) as usize;
                file.write_all_at(&bytes[..len], start)?;
            }
            if d.size > file.metadata()?.len() {
                file.set_len(d.size)?;
            }
        }
        match sync {
            Sync::No => {}
            Sync::Data => file.sync_data()?,
            Sync::All => file.sync_all()?,
        }
        Ok(())
    }

    fn unsynced(&self) -> u64 {
        self.dirty.values().map(|d| d.pages.len() as u64 * PAGE).sum()
    }

    /// Power lost: drop what was not synced, undo the name changes no directory fsync made
    /// durable (newest first). Returns (bytes dropped, files, changes undone).
    fn lose(&mut self) -> (u64, usize, usize) {
        let bytes = self.unsynced();
        let files = self.dirty.len();
        self.dirty.clear();
        self.settle_old();
        let changes = std::mem::take(&mut self.journal);
        let undone = changes.len();
        for (_, change) in changes.into_iter().rev() {
            let result = match change {
                Change::Created { path } => {
                    let real = self.real(&path);
                    self.forget_path(&path);
                    match fs::symlink_metadata(&real) {
                        Ok(m) if m.is_dir() => fs::remove_dir_all(&real),
                        Ok(_) => fs::remove_file(&real),
                        Err(_) => Ok(()),
                    }
                }
                Change::Removed { path, kept } => fs::rename(&kept, self.real(&path)),
                Change::Renamed { from, to, replaced } => {
                    let back = fs::rename(self.real(&to), self.real(&from));
                    self.moved(&to, &from);
                    match (back, replaced) {
                        (Ok(()), Some(kept)) => fs::rename(kept, self.real(&to)),
                        (result, _) => result,
                    }
                }
            };
            if let Err(e) = result {
                eprintln!("powerfs: undoing a change failed: {e}");
            }
        }
        (bytes, files, undone)
    }

    /// Settle the changes for which `durable` holds (their undo information is dropped).
    fn settle_where(&mut self, durable: impl Fn(&Instant, &Change) -> bool) {
        let (done, kept): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.journal).into_iter().partition(|(t, c)| durable(t, c));
        self.journal = kept;
        for (_, change) in done {
            change.settle();
        }
    }

    /// What an OS would have made durable by now without being asked: names older than the
    /// journal's commit interval, data older than the writeback delay.
    fn settle_old(&mut self) {
        let commit = self.commit;
        self.settle_where(|t, _| t.elapsed() >= commit);
        let old: Vec<u64> = self
            .dirty
            .iter()
            .filter(|(_, d)| d.since.elapsed() >= self.writeback)
            .map(|(ino, _)| *ino)
            .collect();
        for ino in old {
            if let Some(path) = self.paths.get(&ino).cloned() {
                if let Err(e) = self.flush(ino, &path, Sync::No) {
                    eprintln!("powerfs: writing back {}: {e}", path.display());
                    self.dirty.remove(&ino);
                }
            }
        }
    }

    /// Everything durable now, as after sync(2) on a machine that settled.
    fn sync_all(&mut self) -> (u64, usize) {
        let bytes = self.unsynced();
        let inodes: Vec<u64> = self.dirty.keys().copied().collect();
        for ino in inodes {
            if let Some(path) = self.paths.get(&ino).cloned() {
                if let Err(e) = self.flush(ino, &path, Sync::All) {
                    eprintln!("powerfs: syncing {}: {e}", path.display());
                }
            }
        }
        self.dirty.clear();
        let changes = self.journal.len();
        self.settle_where(|_, _| true);
        (bytes, changes)
    }

    /// An fsync, of a file or a directory, commits the journal: every name change so far is
    /// durable (ext4 and XFS have one journal, and an fsync forces it).
    fn commit_names(&mut self) {
        self.settle_where(|_, _| true);
    }

    fn sync_dir(&mut self, rel: &Path) -> std::io::Result<()> {
        File::open(self.real(rel))?.sync_all()?;
        self.commit_names();
        Ok(())
    }
}

/// How far a flush of a file's pages to its backing file goes.
#[derive(Clone, Copy)]
enum Sync {
    /// written back only (an OS's own writeback: not yet durable)
    No,
    /// fdatasync(2)
    Data,
    /// fsync(2)
    All,
}

struct PowerFs {
    state: Arc<Mutex<State>>,
}

impl PowerFs {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Make a new node named `name` in `parent` with `make` (given its real path), journal its
    /// creation, and reply with its entry.
    fn made(
        &self,
        parent: u64,
        name: &OsStr,
        reply: ReplyEntry,
        make: impl FnOnce(&Path) -> std::io::Result<()>,
    ) {
        let rel = {
            let mut s = self.lock();
            let rel = match s.child(parent, name) {
                Ok(p) => p,
                Err(e) => return reply.error(e),
            };
            if let Err(e) = make(&s.real(&rel)) {
                return reply.error(errno(&e));
            }
            s.journal.push((Instant::now(), Change::Created { path: rel.clone() }));
            rel
        };
        self.entry(rel, reply)
    }

    /// Remove the node named `name` from `parent` once `check` allows it: keep its content
    /// aside (a power loss may bring it back) and journal its removal.
    fn removed(
        &self,
        parent: u64,
        name: &OsStr,
        reply: ReplyEmpty,
        check: impl FnOnce(&mut State, &Path) -> Result<(), i32>,
    ) {
        let mut s = self.lock();
        let result = (|| -> Result<(), i32> {
            let rel = s.child(parent, name)?;
            check(&mut s, &rel)?;
            let kept = s.keep(&rel).map_err(|e| errno(&e))?;
            s.forget_path(&rel);
            s.journal.push((Instant::now(), Change::Removed { path: rel, kept }));
            Ok(())
        })();
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn entry(&self, rel: PathBuf, reply: ReplyEntry) {
        let mut s = self.lock();
        let ino = s.inode(&rel);
        match s.attr(ino, &rel) {
            Ok(attr) => reply.entry(&TTL, &attr, 0),
            Err(e) => {
                s.forget_path(&rel);
                reply.error(e)
            }
        }
    }
}

impl Filesystem for PowerFs {
    fn init(&mut self, _req: &Request<'_>, _config: &mut KernelConfig) -> Result<(), i32> {
        Ok(())
    }

    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        let rel = match self.lock().child(parent, name) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        self.entry(rel, reply)
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, reply: ReplyAttr) {
        let s = self.lock();
        match s.path(ino).and_then(|rel| s.attr(ino, &rel)) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<u64>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<u32>,
        reply: ReplyAttr,
    ) {
        let mut s = self.lock();
        let result = (|| -> Result<FileAttr, i32> {
            let rel = s.path(ino)?;
            let real = s.real(&rel);
            if let Some(mode) = mode {
                fs::set_permissions(&real, fs::Permissions::from_mode(mode & 0o7777))
                    .map_err(|e| errno(&e))?;
            }
            if uid.is_some() || gid.is_some() {
                let c = cstring(&real);
                let (u, g) = (uid.unwrap_or(u32::MAX), gid.unwrap_or(u32::MAX));
                if unsafe { libc::lchown(c.as_ptr(), u, g) } != 0 {
                    return Err(errno(&std::io::Error::last_os_error()));
                }
            }
            if let Some(size) = size {
                s.truncate(ino, &rel, size).map_err(|e| errno(&e))?;
            }
            if atime.is_some() || mtime.is_some() {
                let spec = |t: Option<TimeOrNow>| match t {
                    None => libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT },
                    Some(TimeOrNow::Now) => libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_NOW },
                    Some(TimeOrNow::SpecificTime(t)) => {
                        let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
                        libc::timespec {
                            tv_sec: d.as_secs() as libc::time_t,
                            tv_nsec: d.subsec_nanos() as libc::c_long,
                        }
                    }
                };
                let times = [spec(atime), spec(mtime)];
                let c = cstring(&real);
                let flags = libc::AT_SYMLINK_NOFOLLOW;
                if unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), flags) }
                    != 0
                {
                    return Err(errno(&std::io::Error::last_os_error()));
                }
            }
            s.attr(ino, &rel)
        })();
        match result {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&mut self, _req: &Request<'_>, ino: u64, reply: ReplyData) {
        let s = self.lock();
        match s.path(ino).and_then(|rel| fs::read_link(s.real(&rel)).map_err(|e| errno(&e))) {
            Ok(target) => reply.data(target.as_os_str().as_bytes()),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        if mode & libc::S_IFMT != libc::S_IFREG {
            return reply.error(libc::EPERM); // only regular files are made here
        }
        self.made(parent, name, reply, |real| {
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(mode & !umask & 0o7777)
                .open(real)
                .and_then(|_| chown(real, req.uid(), req.gid()))
        })
    }

    fn mkdir(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32, umask: u32, // of the new directory
        reply: ReplyEntry,
    ) {
        self.made(parent, name, reply, |real| {
            fs::create_dir(real)
                .and_then(|_| {
                    fs::set_permissions(real, fs::Permissions::from_mode(mode & !umask & 0o7777))
                })
                .and_then(|_| chown(real, req.uid(), req.gid()))
        })
    }

    fn unlink(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        self.removed(parent, name, reply, |s, rel| {
            if let Some(&ino) = s.inodes.get(rel) {
                s.dirty.remove(&ino);
            }
            Ok(())
        })
    }

    fn rmdir(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        self.removed(parent, name, reply, |s, rel| {
            if fs::read_dir(s.real(rel)).map_err(|e| errno(&e))?.next().is_some() {
                return Err(libc::ENOTEMPTY);
            }
            Ok(())
        })
    }

    fn symlink(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        self.made(parent, link_name, reply, |real| {
            std::os::unix::fs::symlink(target, real).and_then(|_| chown(real, req.uid(), req.gid()))
        })
    }

    fn rename(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
        reply: ReplyEmpty,
    ) {
        if flags != 0 {
            return reply.error(libc::EINVAL); // RENAME_EXCHANGE and the like are not offered
        }
        let mut s = self.lock();
        let result = (|| -> Result<(), i32> {
            let from = s.child(parent, name)?;
            let to = s.child(newparent, newname)?;
            fs::symlink_metadata(s.real(&from)).map_err(|e| errno(&e))?;
            let replaced = if fs::symlink_metadata(s.real(&to)).is_ok() {
                if let Some(&ino) = s.inodes.get(&to) {
                    s.dirty.remove(&ino);
                }
                // ext4's auto_da_alloc (on by default): a file that replaces another by rename
                // has its data on disk before the rename commits, fsynced or not.
                if let Some(&ino) = s.inodes.get(&from) {
                    s.flush(ino, &from, Sync::Data).map_err(|e| errno(&e))?;
                }
                Some(s.keep(&to).map_err(|e| errno(&e))?)
            } else {
                None
            };
            fs::rename(s.real(&from), s.real(&to)).map_err(|e| errno(&e))?;
            s.moved(&from, &to);
            s.journal.push((Instant::now(), Change::Renamed { from, to, replaced }));
            Ok(())
        })();
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        match self.lock().path(ino) {
            Ok(_) => reply.opened(0, FOPEN_DIRECT_IO),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        let s = self.lock();
        let result = s
            .path(ino)
            .and_then(|rel| s.read(ino, &rel, offset as u64, size as u64).map_err(|e| errno(&e)));
        match result {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        data: &[u8],
        _write_flags: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyWrite,
    ) {
        let mut s = self.lock();
        let result = s
            .path(ino)
            .and_then(|rel| s.write(ino, &rel, offset as u64, data).map_err(|e| errno(&e)));
        match result {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _lock: u64, reply: ReplyEmpty) {
        reply.ok() // close(2) makes nothing durable
    }

    fn fsync(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, datasync: bool, reply: ReplyEmpty) {
        let mut s = self.lock();
        // fdatasync passes through as fdatasync: a full fsync of the backing file would also
        // commit its timestamps, a journal write the caller did not ask for on every commit
        let sync = if datasync { Sync::Data } else { Sync::All };
        let result = s.path(ino).and_then(|rel| s.flush(ino, &rel, sync).map_err(|e| errno(&e)));
        if result.is_ok() {
            s.commit_names();
        }
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        match self.lock().path(ino) {
            Ok(_) => reply.opened(0, 0),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        mut reply: ReplyDirectory,
    ) {
        let mut s = self.lock();
        let rel = match s.path(ino) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        let entries = match fs::read_dir(s.real(&rel)) {
            Ok(entries) => entries,
            Err(e) => return reply.error(errno(&e)),
        };
        let mut names: Vec<(OsString, FileType)> = vec![
            (OsString::from("."), FileType::Directory),
            (OsString::from(".."), FileType::Directory),
        ];
        for entry in entries.flatten() {
            let kind = entry.metadata().map(|m| kind_of(&m)).unwrap_or(FileType::RegularFile);
            names.push((entry.file_name(), kind));
        }
        for (i, (name, kind)) in names.into_iter().enumerate().skip(offset as usize) {
            let child = match name.to_str() {
                Some(".") => ino,
                Some("..") => FUSE_ROOT_ID,
                _ => s.inode(&rel.join(&name)),
            };
            if reply.add(child, (i + 1) as i64, kind, &name) {
                break;
            }
        }
        reply.ok()
    }

    fn fsyncdir(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, _ds: bool, reply: ReplyEmpty) {
        let mut s = self.lock();
        let result = s.path(ino).and_then(|rel| s.sync_dir(&rel).map_err(|e| errno(&e)));
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        let c = cstring(&self.lock().backing);
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
            return reply.error(errno(&std::io::Error::last_os_error()));
        }
        reply.statfs(
            st.f_blocks,
            st.f_bfree,
            st.f_bavail,
            st.f_files,
            st.f_ffree,
            st.f_bsize as u32,
            st.f_namemax as u32,
            st.f_frsize as u32,
        )
    }

    fn create(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32, umask: u32, flags: i32, // of the new file, and how it is opened
        reply: ReplyCreate,
    ) {
        let mut s = self.lock();
        let result = (|| -> Result<FileAttr, i32> {
            let rel = s.child(parent, name)?;
            let real = s.real(&rel);
            let existed = fs::symlink_metadata(&real).is_ok();
            let mut options = OpenOptions::new();
            options.write(true).create(true).mode(mode & !umask & 0o7777);
            if flags & libc::O_EXCL != 0 {
                options.create_new(true);
            }
            options.open(&real).map_err(|e| errno(&e))?;
            if !existed {
                chown(&real, req.uid(), req.gid()).map_err(|e| errno(&e))?;
                s.journal.push((Instant::now(), Change::Created { path: rel.clone() }));
            }
            let ino = s.inode(&rel);
            if flags & libc::O_TRUNC != 0 {
                s.truncate(ino, &rel, 0).map_err(|e| errno(&e))?;
            }
            s.attr(ino, &rel)
        })();
        match result {
            Ok(attr) => reply.created(&TTL, &attr, 0, 0, FOPEN_DIRECT_IO),
            Err(e) => reply.error(e),
        }
    }
}

/// Answer `lose` and `stats` on the control socket, one line each.
fn control(state: Arc<Mutex<State>>, listener: UnixListener) {
    for stream in listener.incoming().flatten() {
        let mut writer = match stream.try_clone() {
            Ok(w) => w,
            Err(_) => continue,
        };
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
            let answer = match line.trim() {
                "lose" => {
                    let (bytes, files, undone) = s.lose();
                    format!("lost {bytes} bytes of {files} files, undid {undone} name changes")
                }
                "sync" => {
                    let (bytes, changes) = s.sync_all();
                    format!("synced {bytes} bytes and {changes} name changes")
                }
                "stats" => format!(
                    "unsynced {} bytes of {} files, {} name changes",
                    s.unsynced(),
                    s.dirty.len(),
                    s.journal.len()
                ),
                other => format!("error: unknown command {other:?}: lose, sync, stats"),
            };
            drop(s);
            if writeln!(writer, "{answer}").is_err() {
                break;
            }
        }
    }
}

/// Once a second, settle what an OS would have made durable by itself.
fn sweep(state: Arc<Mutex<State>>) {
    loop {
        std::thread::sleep(Duration::from_secs(1));
        state.lock().unwrap_or_else(|e| e.into_inner()).settle_old();
    }
}

fn seconds(args: &[String], flag: &str, default: f64) -> Duration {
    let value = args
        .iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse::<f64>())
        .unwrap_or(Ok(default));
    match value {
        Ok(secs) if secs >= 0.0 => Duration::from_secs_f64(secs),
        _ => {
            eprintln!("powerfs: {flag} takes seconds");
            std::process::exit(2)
        }
    }
}

fn main() {
    let all: Vec<String> = std::env::args().collect();
    let flags = ["--writeback", "--commit"];
    let args: Vec<String> = all
        .iter()
        .enumerate()
        .filter(|(i, a)| {
            !flags.contains(&a.as_str()) && !(*i > 0 && flags.contains(&all[i - 1].as_str()))
        })
        .map(|(_, a)| a.clone())
        .collect();
    if args.len() != 4 {
        eprintln!(
            "usage: powerfs BACKING MOUNTPOINT CONTROL_SOCKET [--writeback SECS] [--commit SECS]"
        );
        std::process::exit(2);
    }
    let writeback = seconds(&all, "--writeback", 30.0);
    let commit = seconds(&all, "--commit", 5.0);
    let backing = fs::canonicalize(&args[1]).unwrap_or_else(|e| {
        eprintln!("powerfs: backing directory {}: {e}", args[1]);
        std::process::exit(2)
    });
    let trash = PathBuf::from(format!("{}.trash", backing.display()));
    if let Err(e) = fs::create_dir_all(&trash) {
        eprintln!("powerfs: trash directory {}: {e}", trash.display());
        std::process::exit(2);
    }
    let state = Arc::new(Mutex::new(State::new(backing, trash, writeback, commit)));
    let swept = Arc::clone(&state);
    std::thread::spawn(move || sweep(swept));
    let _ = fs::remove_file(&args[3]);
    let listener = UnixListener::bind(&args[3]).unwrap_or_else(|e| {
        eprintln!("powerfs: control socket {}: {e}", args[3]);
        std::process::exit(2)
    });
    let shared = Arc::clone(&state);
    std::thread::spawn(move || control(shared, listener));
    let options = [
        MountOption::FSName("powerfs".to_string()),
        MountOption::AllowOther,
        MountOption::DefaultPermissions,
        MountOption::RW,
    ];
    if let Err(e) = fuser::mount2(PowerFs { state }, &args[2], &options) {
        eprintln!("powerfs: mounting {}: {e}", args[2]);
        std::process::exit(1);
    }
}
