//! The Kubernetes manifests (deploy/k8s) agree with the service, the Dockerfile and the
//! project's Nginx config: every flag and variable they give the service is one `seckill
//! serve` reads, each overlay's pod is started with values its flags take, the Nginx in their ConfigMap runs nginx/locations.conf unchanged, the image
//! and the port are the Dockerfile's. scripts/k8s-check.sh renders every overlay and
//! validates it against Kubernetes' schemas; nothing here needs a cluster either.
//!
//! The manifests are read line by line, as deploy.rs reads the compose file: no YAML parser
//! is a dependency of the project, and the manifests keep the lines checked here simple
//! (one `args:` flow list, one `KEY=value` literal per line).

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use seckill_testkit::{nginx, root};

use crate::deploy::{read, serve_help};

/// Every file under deploy/k8s, as (path from the root, contents).
fn manifests() -> Vec<(String, String)> {
    fn walk(dir: &Path, found: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, found);
            } else {
                let rel = path.strip_prefix(root()).unwrap().display().to_string();
                found.push((rel.clone(), read(&rel)));
            }
        }
    }
    let mut found = Vec::new();
    walk(&root().join("deploy/k8s"), &mut found);
    found.sort();
    assert!(
        found.len() >= 10,
        "deploy/k8s holds the manifests: {found:?}"
    );
    found
}

/// `[env: NAME=…]` or `[env: NAME]` (a secret's value is not shown) in `seckill serve --help`.
fn serve_reads(help: &str, var: &str) -> bool {
    help.contains(&format!("[env: {var}=")) || help.contains(&format!("[env: {var}]"))
}

/// The `KEY=value` literals of a kustomization's generators whose key is upper case (the
/// environment variables; the Secret's keys are lower case).
fn env_literals(kustomization: &str) -> Vec<(String, String)> {
    kustomization
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- "))
        .filter_map(|l| l.split_once('='))
        .filter(|(key, _)| key.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .collect()
}

/// The names under the first `env:` of a container: `- name: X` one level in.
fn env_names(manifest: &str) -> Vec<String> {
    let mut lines = manifest.lines().skip_while(|l| l.trim() != "env:");
    let indent = lines.next().expect("an env: list").find('e').unwrap();
    lines
        .take_while(|l| {
            let at = l.len() - l.trim_start().len();
            at > indent
                || (at == indent
                    && (l.trim_start().starts_with("- ") || l.trim_start().starts_with('#')))
        })
        .filter_map(|l| l.strip_prefix(&format!("{}- name: ", " ".repeat(indent))))
        .map(str::to_owned)
        .collect()
}

/// The value after `key: ` on the first line that has it, unquoted.
fn field<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{key}: ")))
        .unwrap_or_else(|| panic!("no `{key}:`"))
        .trim_matches('"')
}

/// Every flag, variable and ConfigMap key the manifests give the service is one `seckill
/// serve --help` lists; a variable that is not the service's is only spelled into another.
#[test]
fn manifests_use_real_flags_and_variables() {
    let help = serve_help();
    for (path, text) in manifests() {
        for (at, _) in text.match_indices("SECKILL_") {
            let var: String = text[at..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            assert!(serve_reads(&help, &var), "{path}: serve reads no {var}");
        }
        if path.ends_with("kustomization.yaml") {
            for (key, value) in env_literals(&text) {
                assert!(
                    key == "RUST_LOG" || serve_reads(&help, &key),
                    "{path}: {key} is no variable of serve's"
                );
                if key == "SECKILL_REDIS_MODE" {
                    assert!(
                        help.contains(&format!("- {value}:")),
                        "{path}: no mode {value}"
                    );
                }
            }
        }
    }

    let deployment = read("deploy/k8s/base/seckill.yaml");
    let args = field(&deployment, "args");
    let args: Vec<String> = serde_json::from_str(args).expect("args: a one-line JSON-style list");
    assert_eq!(args[0], "serve");
    for flag in args.iter().filter(|a| a.starts_with("--")) {
        assert!(help.contains(&format!("{flag} ")), "unknown flag {flag}");
    }
    let names = env_names(&deployment);
    assert!(
        names.contains(&"SECKILL_ADMIN_TOKEN".to_owned()),
        "{names:?}"
    );
    for name in names {
        assert!(
            serve_reads(&help, &name) || deployment.contains(&format!("$({name})")),
            "{name} is neither serve's nor spelled into another variable"
        );
    }
}

/// The instances' orders database is the PostgreSQL of postgres.yaml: its Service, user,
/// database, and the one Secret key both read the password from.
#[test]
fn the_orders_database_is_the_manifests_postgres() {
    let deployment = read("deploy/k8s/base/seckill.yaml");
    let postgres = read("deploy/k8s/base/postgres.yaml");
    let url = deployment
        .lines()
        .skip_while(|l| !l.contains("name: SECKILL_ORDERS_DB"))
        .find_map(|l| l.trim().strip_prefix("value: "))
        .expect("SECKILL_ORDERS_DB has a value");
    let user = postgres
        .lines()
        .skip_while(|l| !l.contains("name: POSTGRES_USER"))
        .find_map(|l| l.trim().strip_prefix("value: "))
        .unwrap();
    let database = postgres
        .lines()
        .skip_while(|l| !l.contains("name: POSTGRES_DB"))
        .find_map(|l| l.trim().strip_prefix("value: "))
        .unwrap();
    let service = postgres.split("kind: Service").nth(1).expect("a Service");
    let expected = format!(
        "postgres://{user}:$(ORDERS_DB_PASSWORD)@{}:{}/{database}",
        field(service, "name"),
        field(service, "port")
    );
    assert_eq!(url, expected);
    for (text, var) in [
        (&deployment, "ORDERS_DB_PASSWORD"),
        (&postgres, "POSTGRES_PASSWORD"),
    ] {
        let key = text
            .lines()
            .skip_while(|l| !l.contains(&format!("name: {var}")))
            .find_map(|l| l.trim().strip_prefix("key: "))
            .unwrap();
        assert_eq!(key, "postgres-password", "{var}");
    }
}

/// The Nginx of the manifests is the project's: the ConfigMap carries nginx/locations.conf
/// unchanged, the main config includes it where the pod mounts it, its upstream is the
/// instances' headless Service on their port, and it passes `nginx -t` (with `resolve`,
/// which the Nginx here may be too old for, left out).
#[test]
fn nginx_in_the_configmap_is_the_projects_own() {
    assert_eq!(
        read("deploy/k8s/base/nginx/locations.conf"),
        read("nginx/locations.conf"),
        "deploy/k8s/base/nginx/locations.conf is a copy of nginx/locations.conf: copy it again"
    );
    let kustomization = read("deploy/k8s/base/kustomization.yaml");
    for file in ["nginx/nginx.conf", "nginx/locations.conf"] {
        assert!(
            kustomization.contains(&format!("  - {file}\n")),
            "the ConfigMap has {file}"
        );
    }
    let deployment = read("deploy/k8s/base/nginx.yaml");
    let config = read("deploy/k8s/base/nginx/nginx.conf");
    let mount = deployment
        .lines()
        .skip_while(|l| !l.contains("- name: config"))
        .find_map(|l| l.trim().strip_prefix("mountPath: "))
        .expect("the ConfigMap is mounted");
    assert!(deployment.contains(&format!("\"-c\", \"{mount}/nginx.conf\"")));
    assert!(config.contains(&format!("include {mount}/locations.conf;")));

    let namespace = field(&kustomization, "namespace");
    let instances = read("deploy/k8s/base/seckill.yaml");
    let service = instances.split("kind: Service").nth(1).expect("a Service");
    assert_eq!(
        field(service, "clusterIP"),
        "None",
        "headless: one upstream server per pod"
    );
    let upstream = format!(
        "server {}.{namespace}.svc.cluster.local:{} resolve ",
        field(service, "name"),
        field(service, "port")
    );
    assert!(config.contains(&upstream), "nginx.conf has `{upstream}`");

    let dir = std::env::temp_dir().join(format!("seckill-k8s-nginx-t-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let testable = config
        .replace("/tmp/", &format!("{}/", dir.display()))
        .replace(
            &format!("{mount}/"),
            &format!("{}/nginx/", root().display()),
        )
        .replace("kube-dns.kube-system.svc.cluster.local", "127.0.0.1")
        .replace(&upstream, "server 127.0.0.1:8081 ");
    let path = dir.join("nginx.conf");
    std::fs::write(&path, testable).unwrap();
    let output = Command::new(nginx::binary())
        .arg("-t")
        .arg("-p")
        .arg(&dir)
        .arg("-c")
        .arg(&path)
        .arg("-e")
        .arg(dir.join("error.log"))
        .output()
        .expect("nginx must be installed (scripts/test.sh installs it)");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The image is the one the Dockerfile says to build, run as its ENTRYPOINT expects, on the
/// port it exposes — which is the port the instances listen on, the Service names and
/// Nginx's upstream uses; and its non-numeric USER is given as a number to the kubelet.
#[test]
fn image_and_port_are_the_dockerfiles() {
    let dockerfile = read("Dockerfile");
    let deployment = read("deploy/k8s/base/seckill.yaml");
    let tag = dockerfile
        .split("docker build -t ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the Dockerfile says how it is built");
    assert_eq!(field(&deployment, "image"), tag);
    let entrypoint = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("ENTRYPOINT "));
    assert_eq!(
        entrypoint,
        Some("[\"seckill\"]"),
        "args: [\"serve\"] runs `seckill serve`"
    );

    let exposed = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("EXPOSE "))
        .expect("EXPOSE");
    let listen = env_literals(&read("deploy/k8s/base/kustomization.yaml"))
        .into_iter()
        .find(|(key, _)| key == "SECKILL_LISTEN")
        .expect("SECKILL_LISTEN in the ConfigMap")
        .1;
    let service = deployment.split("kind: Service").nth(1).unwrap();
    let ports: BTreeSet<&str> = [
        listen.rsplit(':').next().unwrap(),
        field(&deployment, "containerPort"),
        field(service, "port"),
    ]
    .into();
    assert_eq!(ports, BTreeSet::from([exposed]), "one port everywhere");
    assert!(read("deploy/k8s/base/nginx/nginx.conf").contains(&format!(".local:{exposed} ")));

    let user = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("USER");
    // A number (uid[:gid]) the kubelet can check against runAsNonRoot, and the pod's own.
    let uid = user.split(':').next().unwrap_or_default();
    assert!(uid.parse::<u32>().is_ok_and(|uid| uid > 0), "USER {user}");
    assert_eq!(
        field(&deployment, "runAsUser"),
        uid,
        "the pod runs as the image's user"
    );
}

/// Every pod runs as a user that is not root, under the runtime's seccomp profile, and every
/// container on a read-only root, without privilege escalation or capabilities, with
/// resources requested and bounded.
#[test]
fn every_pod_is_locked_down() {
    for (path, text) in manifests()
        .into_iter()
        .filter(|(p, _)| p.ends_with(".yaml"))
    {
        let count = |s: &str| text.matches(s).count();
        let (pods, containers) = (count("\n  template:\n"), count("\n        image: "));
        assert_eq!(
            pods,
            count("runAsNonRoot: true"),
            "{path}: runAsNonRoot per pod"
        );
        assert_eq!(
            pods,
            count("type: RuntimeDefault"),
            "{path}: seccomp per pod"
        );
        for per_container in [
            "readOnlyRootFilesystem: true",
            "allowPrivilegeEscalation: false",
            "drop: [\"ALL\"]",
            "\n          limits:\n",
        ] {
            assert_eq!(
                containers,
                count(per_container),
                "{path}: {per_container:?} per container"
            );
        }
    }
}

/// Each overlay's Redis is durable (AOF, appendfsync always, its directory on a claim of its
/// own), and the Cluster is six nodes joined as three masters with a replica each, every
/// node a seed of the instances, each sale waiting for one replica.
#[test]
fn overlays_redis_is_durable_and_the_cluster_has_a_replica_per_master() {
    for file in ["one-redis/redis.yaml", "cluster/redis-cluster.yaml"] {
        let text = read(&format!("deploy/k8s/overlays/{file}"));
        for pair in [
            "\"--appendonly\", \"yes\"",
            "\"--appendfsync\", \"always\"",
            "\"--dir\", \"/data\"",
        ] {
            assert!(text.contains(pair), "{file}: {pair}");
        }
        assert!(
            text.contains("mountPath: /data\n  volumeClaimTemplates:"),
            "{file}: /data is a claim"
        );
    }

    let nodes = read("deploy/k8s/overlays/cluster/redis-cluster.yaml");
    let job = read("deploy/k8s/overlays/cluster/redis-cluster-create.yaml");
    let (name, replicas) = (field(&nodes, "name"), field(&nodes, "replicas"));
    assert_eq!(replicas, "6");
    assert_eq!(field(&nodes, "serviceName"), name);
    let service = nodes.split("kind: Service").nth(1).unwrap();
    assert_eq!(
        (field(service, "name"), field(service, "clusterIP")),
        (name, "None")
    );
    assert!(
        job.contains("for i in 0 1 2 3 4 5; do"),
        "the Job joins all six"
    );
    assert!(job.contains(&format!("host=\"{name}-$i.{name}\"")));
    assert!(job.contains("--cluster-replicas 1 --cluster-yes"));

    let env: Vec<(String, String)> =
        env_literals(&read("deploy/k8s/overlays/cluster/kustomization.yaml"));
    let value = |key: &str| env.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
    assert_eq!(value("SECKILL_REDIS_MODE"), Some("cluster"));
    assert_eq!(
        value("SECKILL_REDIS_WAIT_REPLICAS"),
        Some("1"),
        "a 200 survives a failover"
    );
    let seeds: Vec<String> = (0..6)
        .map(|i| format!("redis://{name}-{i}.{name}:6379"))
        .collect();
    assert_eq!(value("SECKILL_REDIS_URL"), Some(seeds.join(",").as_str()));
}

/// The variables the Deployment gives the pod itself (`env:`): a `value:` as written, its
/// `$(NAME)`s expanded from the ones before it as Kubernetes does; one from the pod's name
/// or a Secret (`valueFrom:`) by a value of its shape.
fn pod_env(deployment: &str) -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = Vec::new();
    for name in env_names(deployment) {
        let at = deployment
            .find(&format!("- name: {name}\n"))
            .unwrap_or_else(|| panic!("{name}'s entry"));
        let entry: Vec<&str> = deployment[at..].lines().skip(1).take(3).collect();
        let value = match entry[0].trim().strip_prefix("value: ") {
            Some(value) => value.trim_matches('"').to_owned(),
            None if entry.iter().any(|l| l.trim() == "fieldPath: metadata.name") => {
                "seckill-5d8f9c7b6-x2x9z".to_owned()
            }
            None => {
                assert_eq!(entry[0].trim(), "valueFrom:", "{name}: {entry:?}");
                "a-secret-s-value".to_owned()
            }
        };
        let value = found.iter().fold(value, |value, (before, its)| {
            value.replace(&format!("$({before})"), its)
        });
        found.push((name, value));
    }
    found
}

/// The flag of `seckill serve` that `var` sets, from `--help`, and whether it takes a value.
fn flag_of(help: &str, var: &str) -> (String, bool) {
    let lines: Vec<&str> = help.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains(&format!("[env: {var}=")) || l.contains(&format!("[env: {var}]")))
        .unwrap_or_else(|| panic!("serve reads no {var}"));
    let is_flag = |l: &&&str| {
        let l = l.trim_start();
        l.starts_with("--") || (l.len() > 4 && l.starts_with('-') && l[2..].starts_with(", --"))
    };
    let line = lines[..at]
        .iter()
        .rev()
        .find(is_flag)
        .expect("a flag above");
    let flag = line
        .split_whitespace()
        .find(|w| w.starts_with("--"))
        .expect("a long flag");
    (flag.trim_end_matches(',').to_owned(), line.contains('<'))
}

/// Each overlay's pod, started as Kubernetes would start it — the Deployment's `args:`,
/// the ConfigMap's variables (the base's, the overlay's merged over them) and the pod's
/// own — is a `seckill serve` that starts: every value is one its flag takes (its bounds
/// and choices), the flags agree with each other (`ServeArgs::check`), and every Redis URL
/// is one the client reads.
#[test]
fn every_overlays_pod_is_started_with_values_serve_takes() {
    use seckill::config::{Cli, Command};
    let help = serve_help();
    let deployment = read("deploy/k8s/base/seckill.yaml");
    let args: Vec<String> = serde_json::from_str(field(&deployment, "args")).unwrap();
    let base = env_literals(&read("deploy/k8s/base/kustomization.yaml"));
    for overlay in ["one-redis", "cluster"] {
        let mut config = base.clone();
        let path = format!("deploy/k8s/overlays/{overlay}/kustomization.yaml");
        for (key, value) in env_literals(&read(&path)) {
            config.retain(|(k, _)| *k != key);
            config.push((key, value));
        }
        let mut argv = vec!["seckill".to_owned()];
        argv.extend(args.iter().cloned());
        for (var, value) in config.iter().chain(&pod_env(&deployment)) {
            if !var.starts_with("SECKILL_") {
                continue;
            }
            let (flag, takes_value) = flag_of(&help, var);
            assert!(
                takes_value,
                "{overlay}: {var} sets {flag}, a switch: read it here"
            );
            argv.extend([flag, value.clone()]);
        }
        let cli = <Cli as clap::Parser>::try_parse_from(&argv)
            .unwrap_or_else(|e| panic!("{overlay}: {argv:?}:\n{e}"));
        let Command::Serve(serve) = cli.command;
        serve.check().unwrap_or_else(|e| panic!("{overlay}: {e:#}"));
        let store = serve
            .redis
            .store_config(std::time::Duration::from_secs(1))
            .unwrap();
        assert!(!store.url_list().is_empty(), "{overlay}: no Redis URL");
        for url in store.url_list() {
            redis::Client::open(url).unwrap_or_else(|e| panic!("{overlay}: {url}: {e}"));
        }
        let db = serve.orders_db.as_deref().expect("the orders database");
        db.parse::<tokio_postgres::Config>()
            .unwrap_or_else(|e| panic!("{overlay}: {db}: {e}"));
    }
}
