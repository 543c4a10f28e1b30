//! Verifies the CUDA IPC backend on a GPU machine: this process allocates 64 MiB on device 0,
//! fills it, exports an IPC handle and starts itself as a consumer, which opens the handle
//! through the `Backend` trait and checks every byte. Prints one JSON line; exit 0 on success.
#![allow(unsafe_code)]

use accel_transport::cuda_ipc::{self, CudaIpc};
use accel_transport::{Backend, Descriptor};
use cudarc::driver::sys;

const LEN: usize = 64 << 20;

fn pattern(i: usize) -> u8 {
    (i * 7 % 251) as u8
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if !cuda_ipc::available() {
        println!("{{\"ok\": false, \"reason\": \"libcuda not loadable or no device\"}}");
        std::process::exit(2);
    }
    cuda_ipc::bind_device(0).expect("bind device 0");
    if args.len() == 3 && args[1] == "consumer" {
        let desc = Descriptor {
            owner: "producer".into(),
            host: String::new(),
            endpoint: String::new(),
            segment: args[2].clone(),
            buffer: 1,
            len: LEN as u64,
        };
        let mut dst = vec![0u8; LEN];
        let t = std::time::Instant::now();
        CudaIpc.fetch(&desc, &mut dst).expect("fetch through CUDA IPC");
        let secs = t.elapsed().as_secs_f64();
        let bad = dst.iter().enumerate().filter(|(i, b)| **b != pattern(*i)).count();
        println!("{{\"role\": \"consumer\", \"bad_bytes\": {bad}, \"open_and_copy_s\": {secs:.6}}}");
        std::process::exit(if bad == 0 { 0 } else { 1 });
    }
    let host: Vec<u8> = (0..LEN).map(pattern).collect();
    let mut dptr = 0;
    // SAFETY: valid out-pointer and host buffer of LEN bytes; the allocation lives until exit.
    unsafe {
        assert_eq!(sys::cuMemAlloc_v2(&mut dptr, LEN), sys::CUresult::CUDA_SUCCESS, "cuMemAlloc");
        assert_eq!(sys::cuMemcpyHtoD_v2(dptr, host.as_ptr().cast(), LEN), sys::CUresult::CUDA_SUCCESS, "HtoD");
    }
    let handle = cuda_ipc::export(dptr).expect("export");
    let hex: String = handle.iter().map(|b| format!("{b:02x}")).collect();
    let status = std::process::Command::new(&args[0]).args(["consumer", &hex]).status().expect("start the consumer");
    println!("{{\"role\": \"producer\", \"consumer_ok\": {}}}", status.success());
    std::process::exit(if status.success() { 0 } else { 1 });
}
