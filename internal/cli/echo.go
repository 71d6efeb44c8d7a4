package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"egret.io/egret/internal/echo"
)

func newEchoCmd() *cobra.Command {
	var listen string
	cmd := &cobra.Command{
		Use:   "echo",
		Short: "Answer every HTTP request with the caller's address and headers as JSON",
		Long: `Run the "what is my egress IP" service: every request gets a JSON answer with the
caller's address as this server sees it, the method, URL, protocol and headers.
Put it outside the cluster and compare what a pod sees with and without the proxy
(egret doctor --echo URL does that).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "egret echo listening on %s\n", ln.Addr())
			srv := echo.Server()
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			go func() {
				<-ctx.Done()
				sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				srv.Shutdown(sctx)
			}()
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&listen, "listen", ":8080", "address to listen on")
	return cmd
}
