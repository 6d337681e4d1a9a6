//go:build cudaext

package main

import (
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// nvmlInterval is the SM clock sampling interval of the NVML meter.
const nvmlInterval = 5 * time.Millisecond

// nvmlMeter is the powerMeter of a CUDA device: a goroutine reads the NVML
// energy counter (millijoules since the driver loaded), the SM clock and
// the clock-event reasons at start, every nvmlInterval, and at stop.
type nvmlMeter struct {
	dev   nvml.Device
	t0    time.Time
	quit  chan struct{}
	stats chan powerStats
}

// openNVMLMeter opens the NVML device at PCI bus id busID (the CUDA
// device's); an error names what NVML could not do (a driver without
// NVML, a device that does not report energy).
func openNVMLMeter(busID string) (*nvmlMeter, error) {
	if ret := nvml.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML: init: %v", ret)
	}
	dev, ret := nvml.DeviceGetHandleByPciBusId(busID)
	if ret != nvml.SUCCESS {
		nvml.Shutdown()
		return nil, fmt.Errorf("NVML: no device at PCI bus id %s: %v", busID, ret)
	}
	if _, ret := dev.GetTotalEnergyConsumption(); ret != nvml.SUCCESS {
		nvml.Shutdown()
		return nil, fmt.Errorf("NVML: device %s does not report its energy: %v", busID, ret)
	}
	return &nvmlMeter{dev: dev}, nil
}

func (m *nvmlMeter) start() error {
	m.t0 = time.Now()
	m.quit, m.stats = make(chan struct{}), make(chan powerStats, 1)
	go func() {
		var s powerStats
		read := func() {
			e, ret := m.dev.GetTotalEnergyConsumption()
			if ret != nvml.SUCCESS {
				return
			}
			mhz, ret := m.dev.GetClockInfo(nvml.CLOCK_SM)
			if ret != nvml.SUCCESS {
				return
			}
			why, ret := m.dev.GetCurrentClocksEventReasons()
			s.add(powerSample{at: time.Since(m.t0), energyMJ: e, smMHz: float64(mhz),
				capped: ret == nvml.SUCCESS && why&nvml.ClocksEventReasonSwPowerCap != 0})
		}
		read()
		tick := time.NewTicker(nvmlInterval)
		defer tick.Stop()
		for {
			select {
			case <-m.quit:
				read()
				m.stats <- s
				return
			case <-tick.C:
				read()
			}
		}
	}()
	return nil
}

func (m *nvmlMeter) stop(steps int) (*PowerRecord, error) {
	close(m.quit)
	s := <-m.stats
	if s.n == 0 {
		return nil, fmt.Errorf("NVML: no reading of energy and clocks succeeded")
	}
	return s.record(time.Since(m.t0), steps, nvmlInterval), nil
}

func (m *nvmlMeter) close() { nvml.Shutdown() }
