from dataclasses import dataclass
