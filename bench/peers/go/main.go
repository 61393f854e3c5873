// A WebServer hook in Go with the standard library only (net/http,
// encoding/json), as a Go developer would write it for Metacontroller: the
// request is decoded into small structs holding the fields the logic reads,
// the answer is encoded from structs. It answers every POST path with the
// WebServer logic (desired: spec.replicas pods <parent>-<i> with the
// parent's image and port; status: the observed pods Running or Pending, and
// those Ready), so a Database payload gets WebServer-style logic too.
//
// Usage: go-peer [--listen ADDR]   (default 127.0.0.1:8080)
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
)

type objectMeta struct {
	Name       string            `json:"name"`
	Namespace  string            `json:"namespace,omitempty"`
	UID        string            `json:"uid,omitempty"`
	Generation int64             `json:"generation,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
}

type parent struct {
	Metadata objectMeta `json:"metadata"`
	Spec     struct {
		Replicas int    `json:"replicas"`
		Image    string `json:"image"`
		Port     int    `json:"port"`
	} `json:"spec"`
}

type observedPod struct {
	Metadata objectMeta `json:"metadata"`
	Status   struct {
		Phase      string `json:"phase"`
		Conditions []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
		} `json:"conditions"`
	} `json:"status"`
}

type syncRequest struct {
	Parent   parent                            `json:"parent"`
	Children map[string]map[string]observedPod `json:"children"`
}

type containerPort struct {
	ContainerPort int    `json:"containerPort"`
	Name          string `json:"name"`
	Protocol      string `json:"protocol"`
}

type container struct {
	Name           string          `json:"name"`
	Image          string          `json:"image"`
	Ports          []containerPort `json:"ports"`
	ReadinessProbe struct {
		PeriodSeconds int `json:"periodSeconds"`
		TCPSocket     struct {
			Port string `json:"port"`
		} `json:"tcpSocket"`
	} `json:"readinessProbe"`
}

type pod struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   objectMeta `json:"metadata"`
	Spec       struct {
		Containers []container `json:"containers"`
	} `json:"spec"`
}

type condition struct {
	Type               string `json:"type"`
	Status             string `json:"status"`
	Reason             string `json:"reason"`
	Message            string `json:"message"`
	ObservedGeneration int64  `json:"observedGeneration"`
}

type status struct {
	Count         int         `json:"count"`
	ReadyReplicas int         `json:"readyReplicas"`
	Conditions    []condition `json:"conditions"`
}

type syncResponse struct {
	Status   status `json:"status"`
	Children []pod  `json:"children"`
}

func sync(req *syncRequest) syncResponse {
	p := req.Parent
	image, port := p.Spec.Image, p.Spec.Port
	if image == "" {
		image = "nginxdemos/hello"
	}
	if port == 0 {
		port = 80
	}
	labels := map[string]string{
		"app.kubernetes.io/instance":   p.Metadata.Name,
		"app.kubernetes.io/managed-by": "opshooks",
		"app.kubernetes.io/name":       "webserver",
		"controller-uid":               p.Metadata.UID,
	}
	children := make([]pod, 0, p.Spec.Replicas)
	for i := 0; i < p.Spec.Replicas; i++ {
		var c pod
		c.APIVersion, c.Kind = "v1", "Pod"
		c.Metadata = objectMeta{Name: fmt.Sprintf("%s-%d", p.Metadata.Name, i), Namespace: p.Metadata.Namespace, Labels: labels}
		ct := container{Name: "web", Image: image, Ports: []containerPort{{port, "http", "TCP"}}}
		ct.ReadinessProbe.PeriodSeconds = 5
		ct.ReadinessProbe.TCPSocket.Port = "http"
		c.Spec.Containers = []container{ct}
		children = append(children, c)
	}
	count, ready := 0, 0
	for _, observed := range req.Children["Pod.v1"] {
		if observed.Status.Phase == "Running" || observed.Status.Phase == "Pending" {
			count++
		}
		for _, c := range observed.Status.Conditions {
			if c.Type == "Ready" && c.Status == "True" {
				ready++
			}
		}
	}
	cond := condition{Type: "Ready", Status: "False", Reason: "PodsNotReady", ObservedGeneration: p.Metadata.Generation,
		Message: fmt.Sprintf("%d of %d pods are ready", ready, p.Spec.Replicas)}
	if ready >= p.Spec.Replicas {
		cond.Status, cond.Reason = "True", "AllPodsReady"
	}
	return syncResponse{Status: status{Count: count, ReadyReplicas: ready, Conditions: []condition{cond}}, Children: children}
}

func hook(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	var req syncRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(sync(&req)); err != nil {
		log.Print(err)
	}
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to listen on")
	flag.Parse()
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/", hook)
	log.Fatal(http.ListenAndServe(*listen, mux))
}
