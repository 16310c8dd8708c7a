module github.com/owl-latency/owl

go 1.26.0

require (
	github.com/gopacket/gopacket v1.7.7
	github.com/miekg/dns v1.1.73
	github.com/zeebo/xxh3 v1.1.0
	golang.org/x/sync v0.24.0
)

require (
	github.com/klauspost/cpuid/v2 v2.2.10 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
