// Package deptest holds the import rules of egret's internal packages
// (deptest_test.go): which internal packages each may import, so the data
// plane keeps its one direction — accept → admit → classify → decide →
// dial → relay — and no package reaches back up. It has no code.
package deptest
