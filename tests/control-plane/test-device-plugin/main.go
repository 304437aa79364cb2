// Command test-device-plugin is kvpilot's test device plugin: it advertises fake devices of
// extended resources (nvidia.com/gpu, an RDMA resource) to the kubelet through the kubelet's
// device-plugin API (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1), so the scheduler counts
// them and the kubelet admits pods that request them as on a GPU node. No device exists: an
// allocation only tells the container which fake IDs it got, through an environment variable
// (NVIDIA_VISIBLE_DEVICES for nvidia.com/gpu, as NVIDIA's plugin does; KVPILOT_TEST_DEVICES_<NAME>
// for the others), so a test can see what the kubelet allocated.
//
//	test-device-plugin --dir /var/lib/kubelet/device-plugins nvidia.com/gpu=32 rdma/rdma_shared_device_a=8
//
// It serves one socket per resource in --dir and registers each with the kubelet's
// kubelet.sock there; when the kubelet restarts (it removes the plugin sockets), it serves and
// registers again. SIGTERM or SIGINT removes its sockets and exits.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	resource string
	count    int
	env      string
	socket   string
	server   *grpc.Server
}

func (p *plugin) devices() []*pluginapi.Device {
	devices := make([]*pluginapi.Device, p.count)
	for i := range devices {
		devices[i] = &pluginapi.Device{ID: p.deviceID(i), Health: pluginapi.Healthy}
	}
	return devices
}

func (p *plugin) deviceID(i int) string {
	short := p.resource[strings.LastIndex(p.resource, "/")+1:]
	return fmt.Sprintf("fake-%s-%d", short, i)
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends the device list once; the devices never change, so it then waits until
// the kubelet hangs up or the plugin stops.
func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices()}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

func (p *plugin) Allocate(_ context.Context, request *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	response := &pluginapi.AllocateResponse{}
	for _, container := range request.ContainerRequests {
		ids := strings.Join(container.DevicesIds, ",")
		log.Printf("allocated %s to a container: %s", p.resource, ids)
		response.ContainerResponses = append(response.ContainerResponses,
			&pluginapi.ContainerAllocateResponse{Envs: map[string]string{p.env: ids}})
	}
	return response, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// serve listens on the plugin's socket and registers it with the kubelet.
func (p *plugin) serve(dir string) error {
	_ = os.Remove(p.socket)
	listener, err := net.Listen("unix", p.socket)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", p.socket, err)
	}
	p.server = grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(p.server, p)
	go func() { _ = p.server.Serve(listener) }()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, filepath.Base(pluginapi.KubeletSocket)),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		p.stop()
		return err
	}
	defer conn.Close()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     filepath.Base(p.socket),
		ResourceName: p.resource,
	})
	if err != nil {
		p.stop()
		return fmt.Errorf("register %s with the kubelet: %w", p.resource, err)
	}
	log.Printf("registered %d fake %s devices (socket %s)", p.count, p.resource, p.socket)
	return nil
}

func (p *plugin) stop() {
	if p.server != nil {
		p.server.Stop()
		p.server = nil
	}
	_ = os.Remove(p.socket)
}

func main() {
	dir := flag.String("dir", pluginapi.DevicePluginPath, "the kubelet's device-plugin directory (its kubelet.sock)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: %s [--dir DIR] RESOURCE=COUNT...\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	var plugins []*plugin
	for _, arg := range flag.Args() {
		resource, count, ok := strings.Cut(arg, "=")
		n, err := strconv.Atoi(count)
		if !ok || err != nil || n <= 0 || !strings.Contains(resource, "/") {
			log.Fatalf("%q is not RESOURCE=COUNT (e.g. nvidia.com/gpu=8)", arg)
		}
		env := "NVIDIA_VISIBLE_DEVICES"
		if resource != "nvidia.com/gpu" {
			short := strings.ToUpper(strings.NewReplacer("/", "_", ".", "_", "-", "_").Replace(resource[strings.LastIndex(resource, "/")+1:]))
			env = "KVPILOT_TEST_DEVICES_" + short
		}
		socket := filepath.Join(*dir, fmt.Sprintf("kvpilot-test-%s-%d.sock",
			strings.NewReplacer("/", "_", ".", "_").Replace(resource), os.Getpid()))
		plugins = append(plugins, &plugin{resource: resource, count: n, env: env, socket: socket})
	}

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		// (Re)register every plugin whose socket is gone: at start, and after the kubelet
		// restarted and cleared the directory.
		for _, p := range plugins {
			if _, err := os.Stat(p.socket); err == nil && p.server != nil {
				continue
			}
			p.stop()
			if err := p.serve(*dir); err != nil {
				log.Printf("%v (retrying)", err)
			}
		}
		select {
		case <-stop:
			for _, p := range plugins {
				p.stop()
			}
			log.Printf("stopped")
			return
		case <-tick.C:
		}
	}
}
