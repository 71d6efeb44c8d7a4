// Package watch re-reads a small set of files when they change: mounted
// Secrets and ConfigMaps (credential files, lists of upstream proxies).
//
// The kubelet updates such a volume by writing a new timestamped directory,
// pointing a temporary "..data_tmp" symlink at it and renaming that over
// "..data"; the visible files are symlinks through "..data". A watch on the
// file itself would follow the old inode and miss the swap, so Files watches
// the parent directories with fsnotify and, as a safety net for file systems
// without inotify events, also re-reads on a fixed interval. A change is
// reported only when the content of some file really differs.
package watch
