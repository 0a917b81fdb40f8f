// SPDX-License-Identifier: Apache-2.0

package lab

import (
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// InNetNS runs fn on a fresh OS thread inside network namespace h (name
// is for errors). Sockets fn opens stay in h after it returns. The thread
// is locked and never unlocked, so it ends with its goroutine and no other
// goroutine ever runs in h by accident; the calling goroutine's namespace
// is untouched.
func InNetNS(h netns.NsHandle, name string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := netns.Set(h); err != nil {
			errc <- fmt.Errorf("enter netns %s: %w", name, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// InNamedNetNS is InNetNS for the namespace named name (/run/netns/name).
func InNamedNetNS(name string, fn func() error) error {
	h, err := netns.GetFromName(name)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", name, err)
	}
	defer h.Close()
	return InNetNS(h, name, fn)
}
