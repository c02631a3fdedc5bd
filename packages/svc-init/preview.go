package main

// The preview proxy: on a swarm, svcd's proxy is on no tenant network, so a preview of an
// environment's port reaches it through the agent, on the one port the environment's node
// publishes. The proxy names the port in X-Svc-Preview-Port and shows the preview token (an
// HMAC of the agent's token: the proxy's configuration, which holds it, gives no way to run a
// command); the request goes on to that port on the environment's own loopback, as it came
// (WebSocket upgrades too: httputil.ReverseProxy carries them since Go 1.12).

import (
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

// previewTokenOf is what the proxy shows for previews (svcd's previewToken in agent.ts).
func previewTokenOf(agentToken []byte) []byte {
	mac := hmac.New(sha256.New, agentToken)
	mac.Write([]byte("svc-preview"))
	return []byte(base64.RawURLEncoding.EncodeToString(mac.Sum(nil)))
}

// previewProxy forwards to a port of the environment's loopback.
type previewProxy struct {
	token     []byte
	agentPort int
	slots     chan struct{}
	proxy     *httputil.ReverseProxy
}

func newPreviewProxy(agentToken []byte, agentPort int) *previewProxy {
	transport := &http.Transport{
		// Never the environment's HTTP_PROXY: the preview is this container's own port.
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     30 * time.Second,
	}
	p := &previewProxy{token: previewTokenOf(agentToken), agentPort: agentPort, slots: make(chan struct{}, maxPreviewConnections)}
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
			writeJSON(w, http.StatusBadGateway, map[string]string{"error": "nothing answers on port " + r.URL.Port() + " in the environment"})
		},
	}
	return p
}

// serve answers a request that names a preview port: 401 without the preview token, 400 for a
// port that is none (or the agent's own), 503 while the proxy's connections are all in use.
func (p *previewProxy) serve(w http.ResponseWriter, r *http.Request) {
	given := []byte(r.Header.Get(previewTokenHeader))
	if subtle.ConstantTimeCompare(given, p.token) != 1 {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "unauthorized"})
		return
	}
	port, err := strconv.Atoi(r.Header.Get(previewPortHeader))
	if err != nil || port < 1 || port > 65535 || port == p.agentPort {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "the preview port must be a port from 1 to 65535 other than the agent's"})
		return
	}
	// The connection counts among the previews' from its first preview request on, not the agent's.
	if c, ok := connOf(r).(*slotConn); ok && !c.moveTo(p.slots) {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "too many preview connections to this environment"})
		return
	}
	r.URL.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	p.proxy.ServeHTTP(w, r)
}
