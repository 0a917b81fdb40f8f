// SPDX-License-Identifier: Apache-2.0

package topo

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// SetTxChecksum turns TX checksum offload of interface dev on or off, as
// `ethtool -K DEV tx on|off` does. Hosts that send through an XDP
// forwarder need it off: with it on, a veth passes on TCP and UDP packets
// whose checksum the stack left for the device to finish
// (CHECKSUM_PARTIAL); XDP forwards the bare frame, which has lost that
// note, so nothing finishes it and the receiver sees a bad checksum.
func (n *NS) SetTxChecksum(dev string, on bool) error {
	return n.ethtoolSet(dev, "tx checksum offload", unix.ETHTOOL_STXCSUM, on)
}

// SetGRO turns generic receive offload of interface dev on or off, as
// `ethtool -K DEV gro on|off` does. On a veth, GRO on turns on NAPI, and a
// veth accepts frames that XDP redirects into its peer only with NAPI on
// (or an XDP program attached).
func (n *NS) SetGRO(dev string, on bool) error {
	return n.ethtoolSet(dev, "gro", unix.ETHTOOL_SGRO, on)
}

// GRO reports whether generic receive offload is on for dev.
func (n *NS) GRO(dev string) (bool, error) {
	return n.ethtoolGet(dev, "gro", unix.ETHTOOL_GGRO)
}

// TxChecksum reports whether TX checksum offload is on for dev.
func (n *NS) TxChecksum(dev string) (bool, error) {
	return n.ethtoolGet(dev, "tx checksum offload", unix.ETHTOOL_GTXCSUM)
}

// ethtoolValue is struct ethtool_value of linux/ethtool.h.
type ethtoolValue struct {
	cmd, data uint32
}

// ifreqData is struct ifreq with ifr_data set: the name, then a union
// whose largest member (struct ifmap) makes it 24 bytes on 64-bit.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [24 - unsafe.Sizeof(uintptr(0))]byte
}

func (n *NS) ethtoolSet(dev, what string, cmd uint32, on bool) error {
	v := ethtoolValue{cmd: cmd}
	if on {
		v.data = 1
	}
	if err := n.ethtool(dev, &v); err != nil {
		return fmt.Errorf("turn %s %s on %s in %s: %w", what, onOff(on), dev, n.Name, err)
	}
	return nil
}

func (n *NS) ethtoolGet(dev, what string, cmd uint32) (bool, error) {
	v := ethtoolValue{cmd: cmd}
	if err := n.ethtool(dev, &v); err != nil {
		return false, fmt.Errorf("read %s of %s in %s: %w", what, dev, n.Name, err)
	}
	return v.data != 0, nil
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// ethtool runs one legacy SIOCETHTOOL command on dev, from a socket made
// inside the namespace (the ioctl acts on the socket's namespace).
// Netlink's route family has no offload settings, and the ethtool
// netlink family is not in the netlink library; the legacy commands
// change the same feature bits (ethtool_set_one_feature).
func (n *NS) ethtool(dev string, v *ethtoolValue) error {
	var ifr ifreqData
	if len(dev) >= len(ifr.name) {
		return fmt.Errorf("interface name %q too long", dev)
	}
	copy(ifr.name[:], dev)
	ifr.data = unsafe.Pointer(v)
	return n.Do(func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("socket: %w", err)
		}
		defer unix.Close(fd)
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr))); errno != 0 {
			return errno
		}
		return nil
	})
}
