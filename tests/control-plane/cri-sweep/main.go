// Command cri-sweep lists or removes the pods a container runtime holds, through the same CRI
// calls the kubelet makes (k8s.io/cri-api runtime v1), so the runtime tears each pod down as
// it would for the kubelet: containers stopped and removed, the sandbox's network released
// through its CNI plugins, its network namespace and shm mount removed.
//
//	cri-sweep --endpoint unix:///run/x/containerd.sock list [NAMESPACE]
//	    one JSON object per line for each pod sandbox and container (of NAMESPACE, or all), with
//	    each container's start and finish times in nanoseconds
//	cri-sweep --endpoint unix:///run/x/containerd.sock remove-all
//	    stops and removes every pod sandbox and container
//
// scripts/node.sh runs remove-all when the node goes down (the kubelet is stopped by then and
// would not do it); the node tests run list to see that a deleted resource left nothing.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

type entry struct {
	Kind      string `json:"kind"`
	ID        string `json:"id"`
	Pod       string `json:"pod"`
	PodUID    string `json:"pod_uid"`
	Namespace string `json:"namespace"`
	Container string `json:"container,omitempty"`
	State     string `json:"state"`
	// A container's attempt (restarts) and when it started and finished, in nanoseconds since
	// the epoch as the runtime recorded them (0: not yet).
	Attempt    uint32 `json:"attempt,omitempty"`
	StartedAt  int64  `json:"started_at,omitempty"`
	FinishedAt int64  `json:"finished_at,omitempty"`
}

func main() {
	endpoint := flag.String("endpoint", "", "the runtime's CRI socket, unix:///path")
	flag.Parse()
	if *endpoint == "" || flag.NArg() == 0 {
		fmt.Fprintf(os.Stderr, "usage: %s --endpoint unix:///path list [NAMESPACE] | remove-all\n", os.Args[0])
		os.Exit(2)
	}
	conn, err := grpc.NewClient(*endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := runtimeapi.NewRuntimeServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	switch flag.Arg(0) {
	case "list":
		namespace := flag.Arg(1)
		if err := list(ctx, client, namespace); err != nil {
			log.Fatal(err)
		}
	case "remove-all":
		if err := removeAll(ctx, client); err != nil {
			log.Fatal(err)
		}
	default:
		log.Fatalf("unknown command %q", flag.Arg(0))
	}
}

func list(ctx context.Context, client runtimeapi.RuntimeServiceClient, namespace string) error {
	sandboxes, err := client.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("list pod sandboxes: %w", err)
	}
	out := json.NewEncoder(os.Stdout)
	for _, s := range sandboxes.Items {
		if namespace != "" && s.Metadata.Namespace != namespace {
			continue
		}
		_ = out.Encode(entry{Kind: "sandbox", ID: s.Id, Pod: s.Metadata.Name, PodUID: s.Metadata.Uid, Namespace: s.Metadata.Namespace, State: s.State.String()})
	}
	containers, err := client.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	for _, c := range containers.Containers {
		pod, ns := c.Labels["io.kubernetes.pod.name"], c.Labels["io.kubernetes.pod.namespace"]
		if namespace != "" && ns != namespace {
			continue
		}
		e := entry{Kind: "container", ID: c.Id, Pod: pod, PodUID: c.Labels["io.kubernetes.pod.uid"], Namespace: ns,
			Container: c.Metadata.Name, State: c.State.String(), Attempt: c.Metadata.Attempt}
		if status, err := client.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.Id}); err == nil && status.Status != nil {
			e.StartedAt, e.FinishedAt = status.Status.StartedAt, status.Status.FinishedAt
		}
		_ = out.Encode(e)
	}
	return nil
}

func removeAll(ctx context.Context, client runtimeapi.RuntimeServiceClient) error {
	sandboxes, err := client.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("list pod sandboxes: %w", err)
	}
	failed := 0
	for _, s := range sandboxes.Items {
		name := s.Metadata.Namespace + "/" + s.Metadata.Name
		// StopPodSandbox stops the pod's containers and releases its network; RemovePodSandbox
		// removes its containers and the sandbox.
		if _, err := client.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: s.Id}); err != nil {
			log.Printf("stop pod %s: %v", name, err)
			failed++
			continue
		}
		if _, err := client.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: s.Id}); err != nil {
			log.Printf("remove pod %s: %v", name, err)
			failed++
			continue
		}
		log.Printf("removed pod %s", name)
	}
	// Containers whose sandbox was already gone.
	containers, err := client.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	for _, c := range containers.Containers {
		_, _ = client.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: c.Id, Timeout: 0})
		if _, err := client.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: c.Id}); err != nil {
			log.Printf("remove container %s: %v", c.Id, err)
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d pods or containers could not be removed", failed)
	}
	return nil
}
