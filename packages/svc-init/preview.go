package main

// The preview proxy: on a swarm, svcd's proxy is on no tenant network, so a preview of an
// environment's port reaches it through the agent, on the one port the environment's node
// publishes. The proxy names the port in X-Svc-Preview-Port and shows the preview token (an
// HMAC of the agent's token: the proxy's configuration, which holds it, gives no way to run a
// command); the request goes on to that port on the environment's own loopback, as it came
// (WebSocket upgrades too: httputil.ReverseProxy carries them since Go 1.12).

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"time"
)

const (
	previewPortHeader  = "X-Svc-Preview-Port"
	previewTokenHeader = "X-Svc-Preview-Token"
)

// Connections the proxy holds at once for previews (a browser opens several, and keeps a
// WebSocket for a dev server's reloads), apart from the agent's own: previews never take the
// slots svcd's commands need.
const maxPreviewConnections = 128

// previewTokenOf is what the proxy shows for a preview of port (svcd's previewToken in agent.ts):
// it opens that port only.
func previewTokenOf(agentToken []byte, port int) []byte {
	mac := hmac.New(sha256.New, agentToken)
	mac.Write([]byte("svc-preview:" + strconv.Itoa(port)))
	return []byte(base64.RawURLEncoding.EncodeToString(mac.Sum(nil)))
}

// previewProxy forwards to a port of the environment's loopback.
type previewProxy struct {
	agentToken []byte
	agentPort  int
	slots      chan struct{}
	proxy      *httputil.ReverseProxy
}

// dialLoopback reaches the port on the IPv4 loopback, else on the IPv6 one (a dev server that
// listens on "localhost" may have taken ::1 only).
func dialLoopback(ctx context.Context, network, addr string) (net.Conn, error) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	conn, err := dialer.DialContext(ctx, "tcp4", net.JoinHostPort("127.0.0.1", port))
	if err == nil {
		return conn, nil
	}
	if conn6, err6 := dialer.DialContext(ctx, "tcp6", net.JoinHostPort("::1", port)); err6 == nil {
		return conn6, nil
	}
	return nil, err
}

func newPreviewProxy(agentToken []byte, agentPort int) *previewProxy {
	transport := &http.Transport{
		// Never the environment's HTTP_PROXY: the preview is this container's own port.
		Proxy:               nil,
		DialContext:         dialLoopback,
		MaxIdleConnsPerHost: 16,
		// Below the idle timeouts of the servers it reaches (Node's: 5 s), so that a request (a POST
		// cannot be retried) is not sent on a connection the server is closing.
		IdleConnTimeout: 3 * time.Second,
	}
	p := &previewProxy{agentToken: agentToken, agentPort: agentPort, slots: make(chan struct{}, maxPreviewConnections)}
	p.proxy = &httputil.ReverseProxy{
		// The target port was checked and put in the URL's host by serve; the Host header stays
		// the preview's (a dev server may check it), and svc's own headers go.
		Director: func(r *http.Request) {
			r.URL.Scheme = "http"
			r.Header.Del(previewPortHeader)
			r.Header.Del(previewTokenHeader)
		},
		Transport: transport,
		// Streamed answers (server-sent events) as they come.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeJSON(w, http.StatusBadGateway, map[string]string{"error": "port " + r.URL.Port() + " in the environment did not answer: " + err.Error()})
		},
	}
	return p
}

// serve answers a request that names a preview port: 400 for a port that is none (or the
// agent's own), 401 without that port's preview token, 503 while the previews' connections are
// all in use. A refused connection is closed after its answer: it holds none of the agent's
// slots past it.
func (p *previewProxy) serve(w http.ResponseWriter, r *http.Request) {
	refuse := func(status int, why string) {
		w.Header().Set("Connection", "close")
		writeJSON(w, status, map[string]string{"error": why})
	}
	port, err := strconv.Atoi(r.Header.Get(previewPortHeader))
	if err != nil || port < 1 || port > 65535 || port == p.agentPort {
		refuse(http.StatusBadRequest, "the preview port must be a port from 1 to 65535 other than the agent's")
		return
	}
	given := []byte(r.Header.Get(previewTokenHeader))
	if subtle.ConstantTimeCompare(given, previewTokenOf(p.agentToken, port)) != 1 {
		refuse(http.StatusUnauthorized, "unauthorized")
		return
	}
	// The connection counts among the previews' from its first preview request on, not the agent's.
	if c, ok := connOf(r).(*slotConn); ok && !c.moveTo(p.slots) {
		refuse(http.StatusServiceUnavailable, "too many preview connections to this environment")
		return
	}
	r.URL.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	p.proxy.ServeHTTP(w, r)
}
