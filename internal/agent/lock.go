// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrLocked is returned when another agent runs on the same config file
// or pin dir.
var ErrLocked = errors.New("another edgeplane agent holds it")

// Two agents on one config file would both fold and trim its journal;
// on one pin dir they would both flip generations in the same maps. Each
// takes an exclusive flock(2) for its life: on the pin dir itself (bpffs
// holds no regular files, and the VFS locks any inode) and on FILE.lock
// beside the config (the fold replaces the config file by rename, so a
// lock on the file would be on an inode the next agent never opens). The
// kernel drops a flock when its holder dies, even by SIGKILL, so a lock
// never outlives its agent.

// lock holds one flock.
type lock struct{ f *os.File }

// lockPath takes an exclusive lock on path (a directory, or a file it
// creates), without waiting: what is locked belongs to another agent.
func lockPath(path, what string, dir bool) (*lock, error) {
	var f *os.File
	var err error
	if dir {
		f, err = os.Open(path)
	} else {
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s to lock it: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder := ""
		if errors.Is(err, unix.EWOULDBLOCK) {
			if pid := lockHolder(f); pid > 0 {
				holder = " (pid " + strconv.Itoa(pid) + ")"
			}
			err = ErrLocked
		}
		f.Close()
		return nil, fmt.Errorf("lock %s %s: %w%s; one agent per %s: stop the other one, or give this one its own", what, path, err, holder, what)
	}
	return &lock{f: f}, nil
}

func (l *lock) release() {
	if l != nil {
		l.f.Close()
	}
}

// lockHolder finds the process holding a flock on f's inode in
// /proc/locks ("1: FLOCK ADVISORY WRITE PID MAJ:MIN:INODE 0 EOF"), 0 if
// none is found (the holder is in another pid namespace, or just left).
func lockHolder(f *os.File) int {
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil {
		return 0
	}
	id := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	pl, err := os.Open("/proc/locks")
	if err != nil {
		return 0
	}
	defer pl.Close()
	sc := bufio.NewScanner(pl)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 6 && fields[1] == "FLOCK" && fields[5] == id {
			pid, _ := strconv.Atoi(fields[4])
			return pid
		}
	}
	return 0
}
