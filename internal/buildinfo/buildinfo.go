// Package buildinfo tells which build of owl is running.
package buildinfo

import "runtime/debug"

// Version returns the module version of the running binary, or "dev".
func Version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}
