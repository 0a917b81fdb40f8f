module github.com/edgeplane/edgeplane

go 1.26.8

require (
	github.com/cilium/ebpf v0.22.0
	gopkg.in/yaml.v3 v3.0.1
)

require (
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

tool github.com/cilium/ebpf/cmd/bpf2go
