# One image for the operator (`kraftwerk operator`), the engine (`kraft server start`,
# `kraft storage format`) and Apache Kafka's own nodes (node pools with `implementation:
# apache-kafka`: `kafka.Kafka` and `kafka.tools.StorageTool` on a Java 17 runtime). Two stages: the
# first builds a virtualenv with the project and its dependencies, the second puts Debian's headless
# Java 17 runtime, Kafka's jars and that virtualenv on a fresh base and runs as a non-root user.
#
# Kafka's jars come from the build context: run `scripts/fetch-kafka-jars` first (it puts them in
# .kafka-jars/<version>/; KAFKA_VERSION names that version).
#
# BASE_IMAGE names the base. It must be Debian-like and ship the pinned Python with its venv module:
# the default is the official Python image at a fixed patch release; where no registry is reachable,
# e2e/cluster/image builds a local base from Debian packages and passes it here.
ARG BASE_IMAGE=python:3.11.14-slim-bookworm

FROM ${BASE_IMAGE} AS build
# the Python the project is tested with: a base with another interpreter fails the build here
ARG PYTHON_VERSION=3.11
RUN python3 -c "import sys; want = tuple(int(p) for p in '${PYTHON_VERSION}'.split('.')); \
have = sys.version_info[:len(want)]; \
sys.exit(0 if have == want else f'BASE_IMAGE has Python {sys.version.split()[0]}, this image pins ${PYTHON_VERSION}')"
RUN python3 -m venv /opt/kraftwerk && /opt/kraftwerk/bin/pip install --no-cache-dir --upgrade pip
COPY pyproject.toml /src/
# the dependencies first, read from pyproject.toml, in a layer of their own: a change of the
# project's code (or README) alone then rebuilds from the next step in seconds instead of reinstalling them all;
# with the `clients` extra: kafka-python, for client pods and `kubectl exec` checks against the brokers
RUN /opt/kraftwerk/bin/python -c "import tomllib; p = tomllib.load(open('/src/pyproject.toml', 'rb'))['project']; \
print('\n'.join(p['dependencies'] + p['optional-dependencies']['clients']))" > /tmp/requirements.txt \
 && /opt/kraftwerk/bin/pip install --no-cache-dir -r /tmp/requirements.txt
COPY README.md /src/
COPY engine /src/engine
COPY operator /src/operator
COPY pipeline /src/pipeline
RUN /opt/kraftwerk/bin/pip install --no-cache-dir --no-deps "/src[clients]" \
 && /opt/kraftwerk/bin/python -c "import kraft_engine, kraft_operator.cli, kraft_pipeline" \
 && /opt/kraftwerk/bin/python -m compileall -q /opt/kraftwerk > /dev/null

FROM ${BASE_IMAGE}
ARG UID=10001
ARG KAFKA_VERSION=4.1.0
RUN groupadd --gid ${UID} kraftwerk \
 && useradd --no-log-init --uid ${UID} --gid ${UID} --home-dir /var/lib/kraftwerk --create-home --shell /usr/sbin/nologin kraftwerk
# The Java runtime and Kafka's jars sit in layers before the project's virtualenv: a code change
# rebuilds none of them. The man directory: slim bases drop it, and the JRE's alternatives need it.
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless > /dev/null \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb \
 && java -version
COPY .kafka-jars/${KAFKA_VERSION}/ /opt/kafka/libs/
RUN test -s /opt/kafka/libs/kafka_2.13-${KAFKA_VERSION}.jar
COPY --from=build /opt/kraftwerk /opt/kraftwerk
ENV PATH=/opt/kraftwerk/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER ${UID}:${UID}
WORKDIR /var/lib/kraftwerk
CMD ["kraftwerk", "operator"]
