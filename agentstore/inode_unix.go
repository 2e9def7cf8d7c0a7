//go:build unix

package agentstore

import (
	"os"
	"syscall"
)

// inode is a file's inode number and change time (ctime, which no one
// can set back as they can the modification time): 0, 0 where the
// platform gives none.
func inode(fi os.FileInfo) (ino uint64, ctime int64) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino), ctimeOf(st) //nolint:unconvert // int64 on some platforms
	}
	return 0, 0
}
