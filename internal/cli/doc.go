// Package cli holds egret's cobra commands. Each command turns its flags into
// typed options and makes one call into the package that does the work; no
// product logic lives here.
package cli
