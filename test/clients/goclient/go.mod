module egret.io/noproxy-goclient

go 1.22
